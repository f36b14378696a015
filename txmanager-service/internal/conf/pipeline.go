package conf

import (
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Retention deletes final transactions (with their attempts and feed rows) older than
// Horizon, BatchSize at a time, every Interval; 0 keeps everything. The horizon is also how
// long a requestId is remembered for replays, and how old a feed cursor may be.
type Retention struct {
	Horizon Duration `json:"horizon"`
	// Interval between retention passes.
	Interval Duration `json:"interval"`
	// BatchSize rows are deleted per statement, so a pass never holds locks long.
	BatchSize int `json:"batchSize"`
	// MaxBatchesPerPass bounds one pass; the next pass goes on.
	MaxBatchesPerPass int `json:"maxBatchesPerPass"`
	// AuditHorizon is the audit trail's own retention: records older than this are deleted
	// (the pruning is itself recorded, and the chain is checked from where it cut); 0 keeps
	// the trail for ever. Never tied to the transactions' horizon.
	AuditHorizon Duration `json:"auditHorizon"`
}

// Feed paces the completions feed: how often completions get their positions, how long a
// long-poll may wait, and how often a waiting reader looks for positions other nodes gave.
type Feed struct {
	SequenceInterval Duration `json:"sequenceInterval"`
	MaxWait          Duration `json:"maxWait"`
	PollInterval     Duration `json:"pollInterval"`
}

// Pipeline sizes and paces the loops after allocation.
type Pipeline struct {
	// Enabled false makes a node that allocates nonces but never signs, broadcasts or
	// tracks: only for measuring the allocation path alone (make bench). Never in service.
	Enabled     bool `json:"enabled"`
	SubmitBatch int  `json:"submitBatch"`
	// SignConcurrency bounds the signatures of one signer's batch in flight at once: with
	// a remote key at tens of milliseconds a signature, it sets the signer's pace.
	SignConcurrency int `json:"signConcurrency"`
	// SubmitInterval between signing passes (a new allocation wakes one at once).
	SubmitInterval Duration `json:"submitInterval"`
	Receipts       Receipts `json:"receipts"`
	// FinalityInterval between finality passes (a new head with receipts held wakes one).
	FinalityInterval Duration `json:"finalityInterval"`
	AdoptInterval    Duration `json:"adoptInterval"`
	// SignerConcurrency bounds how many signers' work (signing, broadcasting, rebroadcasting,
	// stuck handling) runs at once; each signer runs on its own, so one that hangs holds up
	// no other.
	SignerConcurrency int `json:"signerConcurrency"`
	// SigningStall holds back a signer whose key source cannot sign.
	SigningStall SigningStall `json:"signingStall"`
}

// SigningStall: while a signer's key source fails to sign, its creates are refused (503
// SIGNER_UNAVAILABLE) once MaxUnsigned of its transactions wait for a signature or it has
// failed for MaxDuration, until a signature succeeds again.
type SigningStall struct {
	MaxUnsigned int      `json:"maxUnsigned"`
	MaxDuration Duration `json:"maxDuration"`
}

// Receipts tunes the receipt checker.
type Receipts struct {
	// PollInterval: a transaction the node has no receipt for is looked up again after this.
	PollInterval Duration `json:"pollInterval"`
	// Workers look chunks of receipts up at once.
	Workers   int `json:"workers"`
	BatchSize int `json:"batchSize"`
	// MaxBackoff caps the delay after repeated look-up errors.
	MaxBackoff Duration `json:"maxBackoff"`
	// BlockScanMinPending: from this many transactions awaiting receipts on, new blocks'
	// receipts are read whole (eth_getBlockReceipts); 0 always looks up by hash.
	BlockScanMinPending int `json:"blockScanMinPending"`
}

// Resubmit paces rebroadcasts.
type Resubmit struct {
	Interval Duration `json:"interval"`
	// ScanInterval: how often transactions due for a rebroadcast are looked for.
	ScanInterval Duration `json:"scanInterval"`
	// BatchSize bounds the transactions one scan rebroadcasts per signer; the rest wait for
	// the next scan, so one signer's backlog never holds the others' rebroadcasts back.
	BatchSize int `json:"batchSize"`
}

// Stuck sets when the head of line is stuck and what the shipped hook does about it.
type Stuck struct {
	MinAge Duration `json:"minAge"`
	// MinAttempts: the head of line is stuck only after this many broadcasts, too.
	MinAttempts int    `json:"minAttempts"`
	Action      string `json:"action"`
	// ScanInterval: how often each held signer is checked for a stuck head of line and reconciled with the chain.
	ScanInterval Duration `json:"scanInterval"`
}

// Lease is the per-signer lease (docs/design.md#lease-and-fencing).
type Lease struct {
	// Duration of a lease from its last renewal: a node that stops renewing loses its signers after it.
	Duration Duration `json:"duration"`
	// RenewInterval between renewals of the leases in use; below half of Duration.
	RenewInterval Duration `json:"renewInterval"`
	// ClockSkew: a node stops writing for a signer this long before its lease expires by its own clock, so a clock a little ahead never writes after a takeover.
	ClockSkew Duration `json:"clockSkew"`
	// IdleTimeout: a lease unused this long (no create, nothing unfinished) is let go.
	IdleTimeout Duration `json:"idleTimeout"`
	// NotLeaderRetryAfter is the Retry-After a NOT_LEADER answer carries (basic routing).
	NotLeaderRetryAfter Duration `json:"notLeaderRetryAfter"`
}

// Writer sizes the transaction writer: workers, batch size and wait, queue.
type Writer struct {
	// Workers: signers are spread over this many writer workers by hash; each writes one batch transaction at a time.
	Workers int `json:"workers"`
	// BatchSize bounds the creates of one batch.
	BatchSize int `json:"batchSize"`
	// BatchWait: after a batch's first create, how long a worker waits for more (0: write at once; batches still form under load).
	BatchWait Duration `json:"batchWait"`
	// QueueSize bounds each worker's queue; a full queue answers UNAVAILABLE at once.
	QueueSize int `json:"queueSize"`
}

// Nonce is how nonces are allocated and reconciled with the chain.
type Nonce struct {
	ChainQuery ChainQuery `json:"chainQuery"`
	// NonceStateTimeout: a signer's cached next nonce is trusted this long; after it the next allocation asks the chain too.
	NonceStateTimeout Duration `json:"nonceStateTimeout"`
	// FillHoles fills a nonce hole (nonces below a signer's open ones that neither the
	// chain nor the service holds) with placeholder transactions once it has lasted
	// HoleGrace; otherwise everything above it would wait for a person.
	FillHoles bool `json:"fillHoles"`
	// HoleGrace is how long a nonce hole must last before it is filled.
	HoleGrace Duration `json:"holeGrace"`
	// UnknownChainNonces is what happens when the chain's nonce of a signer is above
	// everything the database knows: "quarantine" (no allocation until an operator
	// releases it) or "adopt" (allocate above them: a key also used outside the service).
	UnknownChainNonces string `json:"unknownChainNonces"`
	// RecoveryScanBlocks bounds how many recent blocks are read to find the transaction
	// that took a nonce the database has no attempt for.
	RecoveryScanBlocks uint64 `json:"recoveryScanBlocks"`
}

// Recovery is what reconciles a quarantined signer after a database loss.
type Recovery struct {
	// Mode is "adopt-by-intent" (recorded as unclaimed transactions and released without a
	// person; a retried create with an equal intent adopts one) or "hold" (an operator
	// releases the signer).
	Mode string `json:"mode"`
	// AdoptionWindow is how long a recorded transaction stays adoptable.
	AdoptionWindow Duration `json:"adoptionWindow"`
	// ReleaseWait is how long an operator's release waits for the recovery to carry it out
	// before answering.
	ReleaseWait Duration `json:"releaseWait"`
}

// Recovery modes.
const (
	RecoveryAdoptByIntent = "adopt-by-intent"
	RecoveryHold          = "hold"
)

// What happens to a signer whose chain nonce is above what the database knows.
const (
	UnknownChainNoncesQuarantine = "quarantine"
	UnknownChainNoncesAdopt      = "adopt"
)

// ChainQuery turns the chain's pending nonce term of allocation on.
type ChainQuery struct {
	// Enabled: allocation takes the chain's pending nonce into account (max of chain, cache and database).
	Enabled bool `json:"enabled"`
}

// Create is what a create request is checked against before it gets a nonce.
type Create struct {
	// EstimateGas fills in a gas limit the intent does not give with eth_estimateGas times GasEstimateMultiplier.
	EstimateGas bool `json:"estimateGas"`
	// GasEstimateMultiplier is the margin over the estimate (1..10).
	GasEstimateMultiplier float64 `json:"gasEstimateMultiplier"`
	// MaxDataBytes bounds an intent's call data.
	MaxDataBytes int `json:"maxDataBytes"`
	// MaxGasLimit bounds an intent's gas limit, given or estimated: by default EIP-7825's
	// cap (2^24), which every node of a chain that enforces it refuses to go past.
	MaxGasLimit uint64 `json:"maxGasLimit"`
	// CheckFunds refuses (422 INSUFFICIENT_FUNDS) an intent whose value plus gas limit x
	// max fee exceeds the signer's balance minus what its unfinished transactions may cost.
	CheckFunds bool `json:"checkFunds"`
	// SimulateCalls runs intents with call data and a gas limit through eth_estimateGas
	// capped at that limit, refusing one that cannot run (422 INTENT_REVERTS).
	SimulateCalls bool `json:"simulateCalls"`
	// FundsCacheFor is how long a signer's balance and committed cost are reused between
	// creates; FundsGaugeInterval how often every signer's balance gauges are refreshed.
	FundsCacheFor Duration `json:"fundsCacheFor"`
	// FundsGaugeInterval: how often every signer's balance gauges are refreshed.
	FundsGaugeInterval Duration `json:"fundsGaugeInterval"`
	// ApprovalInterval: how often approved intents are given their nonces (by their
	// signers' lease owners) and approvals past their expiry are ended.
	ApprovalInterval Duration `json:"approvalInterval"`
}

// check: the lease's timing leaves room to renew and to allow for clock skew.
func (l Lease) check(p *problems) {
	p.require(l.Duration > 0, "lease.duration", "must be positive")
	p.require(l.RenewInterval > 0 && l.RenewInterval.Std() < l.Duration.Std()/2,
		"lease.renewInterval", "(%s) must be positive and below half of lease.duration (%s)", l.RenewInterval.Std(), l.Duration.Std())
	p.require(l.ClockSkew >= 0 && l.ClockSkew.Std() < l.Duration.Std()-l.RenewInterval.Std(),
		"lease.clockSkew", "must be non-negative and leave room for renewal (below lease.duration - lease.renewInterval)")
	p.positive(l.IdleTimeout, "lease.idleTimeout")
}

// check: the writer's workers, batches and queues.
func (w Writer) check(p *problems) {
	p.require(w.Workers > 0 && w.Workers <= 4096, "writer.workers", "must be in 1..4096")
	p.require(w.BatchSize > 0 && w.BatchSize <= 10000, "writer.batchSize", "must be in 1..10000")
	p.require(w.BatchWait >= 0, "writer.batchWait", "must not be negative")
	p.require(w.QueueSize > 0, "writer.queueSize", "must be positive")
}

// check: the nonce timings and what to do with nonces the database does not know.
func (n Nonce) check(p *problems) {
	p.require(n.NonceStateTimeout >= 0, "nonce.nonceStateTimeout", "must not be negative")
	p.require(n.HoleGrace >= 0, "nonce.holeGrace", "must not be negative")
	p.require(n.UnknownChainNonces == UnknownChainNoncesQuarantine || n.UnknownChainNonces == UnknownChainNoncesAdopt,
		"nonce.unknownChainNonces", "must be %q or %q", UnknownChainNoncesQuarantine, UnknownChainNoncesAdopt)
}

// check: a known mode and positive windows.
func (r Recovery) check(p *problems) {
	p.require(r.Mode == RecoveryAdoptByIntent || r.Mode == RecoveryHold, "recovery.mode", "must be %q or %q", RecoveryAdoptByIntent, RecoveryHold)
	p.positive(r.AdoptionWindow, "recovery.adoptionWindow")
	p.positive(r.ReleaseWait, "recovery.releaseWait")
}

// check: the admission bounds; call data must fit (hex-encoded) in a request body.
func (c Create) check(p *problems, maxBodyBytes int64) {
	p.require(c.GasEstimateMultiplier >= 1 && c.GasEstimateMultiplier <= 10, "create.gasEstimateMultiplier", "must be in 1..10")
	p.require(c.MaxDataBytes > 0 && int64(c.MaxDataBytes)*2 < maxBodyBytes,
		"create.maxDataBytes", "must be positive and fit (hex-encoded) in server.maxBodyBytes")
	p.require(c.MaxGasLimit >= 21000, "create.maxGasLimit", "must be at least 21000")
	p.positive(c.FundsCacheFor, "create.fundsCacheFor")
	p.positive(c.FundsGaugeInterval, "create.fundsGaugeInterval")
	p.positive(c.ApprovalInterval, "create.approvalInterval")
}

// check: the loops' pace, batches, concurrency and the signing stall bounds.
func (pl Pipeline) check(p *problems) {
	p.require(pl.SignerConcurrency > 0, "pipeline.signerConcurrency", "must be positive")
	p.require(pl.SubmitBatch > 0, "pipeline.submitBatch", "must be positive")
	p.require(pl.SignConcurrency > 0, "pipeline.signConcurrency", "must be positive")
	p.require(pl.SigningStall.MaxUnsigned > 0, "pipeline.signingStall.maxUnsigned", "must be positive")
	p.positive(pl.SigningStall.MaxDuration, "pipeline.signingStall.maxDuration")
	p.positive(pl.SubmitInterval, "pipeline.submitInterval")
	p.positive(pl.FinalityInterval, "pipeline.finalityInterval")
	p.positive(pl.AdoptInterval, "pipeline.adoptInterval")
	p.positive(pl.Receipts.PollInterval, "pipeline.receipts.pollInterval")
	p.require(pl.Receipts.Workers > 0, "pipeline.receipts.workers", "must be positive")
	p.require(pl.Receipts.BatchSize > 0 && pl.Receipts.BatchSize <= 1000, "pipeline.receipts.batchSize", "must be in 1..1000")
	p.require(pl.Receipts.BlockScanMinPending >= 0, "pipeline.receipts.blockScanMinPending", "must not be negative")
}

// check: retention's horizon and its passes' sizes.
func (r Retention) check(p *problems) {
	p.require(r.Horizon >= 0, "retention.horizon", "must not be negative")
	p.positive(r.Interval, "retention.interval")
	p.require(r.BatchSize > 0 && r.BatchSize <= 10000, "retention.batchSize", "must be in 1..10000")
	p.require(r.MaxBatchesPerPass > 0, "retention.maxBatchesPerPass", "must be positive")
	p.require(r.AuditHorizon == 0 || r.AuditHorizon.Std() >= 24*time.Hour, "retention.auditHorizon", "0 (keep for ever) or at least 24h")
}

// check: the feed's rounds and long-polls.
func (f Feed) check(p *problems) {
	p.positive(f.SequenceInterval, "feed.sequenceInterval")
	p.positive(f.PollInterval, "feed.pollInterval")
	p.require(f.MaxWait >= 0, "feed.maxWait", "must not be negative")
}

// check: rebroadcasting's pace.
func (r Resubmit) check(p *problems) {
	p.positive(r.Interval, "resubmit.interval")
	p.positive(r.ScanInterval, "resubmit.scanInterval")
	p.require(r.BatchSize > 0 && r.BatchSize <= 10000, "resubmit.batchSize", "must be in 1..10000")
}

// check: when a head of line is stuck and the action the shipped hook takes.
func (s Stuck) check(p *problems) {
	p.positive(s.ScanInterval, "stuck.scanInterval")
	p.positive(s.MinAge, "stuck.minAge")
	_, actionErr := domain.ParseResolutionAction(s.Action)
	p.require(actionErr == nil, "stuck.action", "must be noop, cancel, replace or placeholder")
}
