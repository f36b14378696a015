package reconcile

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// RecoveredTx is a transaction found on chain at a nonce the database lost, as a row and
// its attempt.
type RecoveredTx struct {
	Tx      domain.ManagedTx
	Attempt pipeline.SignedAttempt
}

// Bounds of one recovery step. A step records at most maxRecoveredPerStep nonces and reads
// at most maxScanBlocksPerStep blocks; steps follow each other while they move forward, and
// each one's progress is committed with the rows it records, so a loss of any size is
// recovered in bounded pieces and none is looked at twice.
const (
	maxRecoveredPerStep  = 512
	maxScanBlocksPerStep = 256
	// recoveryStepsBudget: how long one reconciliation pass keeps taking steps; the next
	// pass (soon, while a quarantine is live) goes on from the recorded progress.
	recoveryStepsBudget = 10 * time.Second
	// anchorRows: transactions on record below the unknown nonces tried as the scan's start.
	anchorRows = 16
	// minReorgMargin: blocks this close to the head are read again until they are deeper.
	minReorgMargin = 12
)

// RecoverFromChain records, for a quarantined signer, every transaction the chain holds at a
// nonce the database does not know, as an unclaimed row of its own: followed to finality like
// any other and adoptable by a retried create with the same intent for the adoption window.
// It records in both recovery modes, so a release never leaves a lost request's transaction
// unrecorded. Once every unknown nonce has its row, the cursor moves past the chain's nonce
// and the quarantine is released: by the recovery itself in adopt-by-intent mode, or when an
// operator asked for it (hold mode). An operator's release also ends a recovery that has
// read up to the head and still misses nonces the chain does not show. It returns how many
// rows it recorded.
func (r *Reconciler) RecoverFromChain(ctx context.Context, lease domain.Lease, rec Recovery) (int, error) {
	ctx, span := pipeline.Span(ctx, r.metrics, "pipeline.recover", lease)
	defer span.End()
	recorded := 0
	until := r.clock.Now().Add(recoveryStepsBudget)
	for {
		step, err := r.recoveryStep(ctx, lease, &rec)
		recorded += step.recorded
		if err != nil {
			return recorded, err
		}
		if step.finish {
			return recorded, r.finishRecovery(ctx, lease, rec, step.missing)
		}
		if !step.moved || ctx.Err() != nil || r.clock.Now().After(until) {
			return recorded, nil
		}
	}
}

// stepResult is what one recovery step did.
type stepResult struct {
	recorded int
	// moved: the step recorded nonces or moved the scan forward; another may follow at once.
	moved bool
	// finish: the quarantine is to be released now; missing is how many unknown nonces the
	// chain did not show (only an operator's release finishes with some missing).
	finish  bool
	missing uint64
}

// recoveryStep takes one bounded step: it finds where to scan when it does not know yet,
// reads blocks forward from there, records the run of unknown nonces it found, and commits
// its progress with them.
func (r *Reconciler) recoveryStep(ctx context.Context, lease domain.Lease, rec *Recovery) (stepResult, error) {
	if rec.RecordedTo >= rec.To {
		return stepResult{finish: r.cfg.RecoverByIntent || rec.ReleaseRequested}, nil
	}
	signer := common.HexToAddress(lease.Signer)
	start := uint64(0)
	if rec.ScanFrom != nil {
		start = *rec.ScanFrom
	} else {
		var err error
		if start, err = r.scanStart(ctx, lease.Signer, rec.RecordedTo); err != nil {
			return stepResult{}, fmt.Errorf("find where the lost transactions start on chain: %w", err)
		}
	}
	scan, err := r.chain.ScanSent(ctx, signer, start, maxScanBlocksPerStep, rec.RecordedTo, maxRecoveredPerStep)
	if err != nil {
		return stepResult{}, fmt.Errorf("scan blocks %d.. for the lost transactions: %w", start, err)
	}
	plan := planRecoveryStep(*rec, start, scan, r.reorgMargin())
	if plan.reachedHead && !plan.anchorTooLate && plan.recordedTo < rec.To && len(plan.found) < maxRecoveredPerStep {
		// Mined up to the head and still short: the rest may wait in the node's pool.
		if plan.found, err = r.appendPending(ctx, signer, rec.To, plan.found, plan.recordedTo); err != nil {
			return stepResult{}, err
		}
		plan.recordedTo = rec.RecordedTo + uint64(len(plan.found))
	}
	moved := plan.recordedTo > rec.RecordedTo || rec.ScanFrom == nil || plan.scanFrom != *rec.ScanFrom
	result := stepResult{moved: moved}
	if moved {
		rows := recoveredRows(signer, lease.Signer, plan.found, r.clock.Now())
		scanFrom := plan.scanFrom
		progress := RecoveryProgress{RecordedTo: plan.recordedTo, ScanFrom: &scanFrom}
		if result.recorded, err = r.store.RecordRecovered(ctx, lease, rows, r.clock.Now().Add(r.cfg.AdoptionWindow), r.cfg.ResubmitInterval, progress); err != nil {
			return stepResult{}, r.leases.Fence(ctx, lease, err)
		}
		if result.recorded > 0 {
			r.metrics.Recovered(ctx, "recorded", result.recorded)
			r.log.WithContext(ctx).Warnw("msg", "transactions the database lost recorded from the chain, unclaimed until a retried create adopts them",
				"signer", lease.Signer, "fencing_token", lease.Token, "recorded", result.recorded, "from_nonce", rec.RecordedTo, "to_nonce", plan.recordedTo-1,
				"unknown_nonces_left", rec.To-plan.recordedTo)
		}
		if plan.anchorTooLate {
			r.log.WithContext(ctx).Warnw("msg", "recovery scan started after the first lost transaction; starting earlier", "signer", lease.Signer,
				"first_unknown_nonce", rec.RecordedTo, "scan_from_block", start, "now_from_block", plan.scanFrom)
		}
		rec.RecordedTo, rec.ScanFrom, rec.Recorded = plan.recordedTo, &plan.scanFrom, rec.Recorded+int64(result.recorded)
	}
	switch {
	case rec.RecordedTo >= rec.To:
		result.finish = r.cfg.RecoverByIntent || rec.ReleaseRequested
	case plan.reachedHead && !plan.anchorTooLate && len(plan.found) == 0:
		// Read to the head and nothing more to find now: the chain does not show the
		// remaining nonces (yet). Only an operator's release goes on without them.
		result.finish, result.missing = rec.ReleaseRequested, rec.To-rec.RecordedTo
		if !rec.ReleaseRequested {
			r.log.WithContext(ctx).Warnw("msg", "the chain does not show the transactions at some unknown nonces yet; the signer stays quarantined",
				"signer", lease.Signer, "missing", rec.To-rec.RecordedTo, "first_missing_nonce", rec.RecordedTo)
		}
		result.moved = false
	}
	return result, nil
}

// stepPlan is what one step found and where the recovery stands after it.
type stepPlan struct {
	// found is the run of unknown nonces from the first unrecorded one, in order.
	found      []services.SentTx
	recordedTo uint64
	// scanFrom is where the next step reads from.
	scanFrom uint64
	// reachedHead: the scan read every block up to the head.
	reachedHead bool
	// anchorTooLate: the scan met a later nonce of the signer before the first unrecorded
	// one, so it started after that one's block; scanFrom moved earlier.
	anchorTooLate bool
}

// planRecoveryStep decides from one forward scan what to record and where the next scan
// starts. A signer's nonces are mined in order, so the first unrecorded nonce is in the
// block of the last one recorded or later: the next scan starts there. Blocks within
// reorgMargin of the head are read again until they are deep enough, so a reorganisation
// that moves a lost transaction into them is still seen.
func planRecoveryStep(rec Recovery, start uint64, scan services.SentScan, reorgMargin uint64) stepPlan {
	// The head is reached only by a scan that read up to it: an endpoint whose head is below
	// the scan's start (one that lags, a balancer's backend behind) read nothing.
	plan := stepPlan{recordedTo: rec.RecordedTo, scanFrom: start, reachedHead: scan.Next > scan.Head && start <= scan.Head}
	for _, tx := range scan.Txs {
		if tx.Nonce < plan.recordedTo || tx.Nonce >= rec.To {
			continue
		}
		if tx.Nonce > plan.recordedTo {
			plan.anchorTooLate = len(plan.found) == 0
			break
		}
		plan.found = append(plan.found, tx)
		plan.recordedTo++
		plan.scanFrom = tx.BlockNumber
	}
	switch {
	case plan.anchorTooLate:
		plan.scanFrom = start - min(start, maxScanBlocksPerStep)
	case len(plan.found) == 0:
		settled := scan.Head + 1 - min(scan.Head+1, reorgMargin)
		plan.scanFrom = max(start, min(scan.Next, settled))
	}
	return plan
}

// appendPending adds the transactions the node holds in its pool (its pending block) at the
// nonces that follow found, and returns the run.
func (r *Reconciler) appendPending(ctx context.Context, signer common.Address, to uint64, found []services.SentTx, next uint64) ([]services.SentTx, error) {
	var nonces []uint64
	for n := next; n < to && len(found)+len(nonces) < maxRecoveredPerStep; n++ {
		nonces = append(nonces, n)
	}
	pending, err := r.chain.SentTransactions(ctx, signer, nonces, 0)
	if err != nil {
		return nil, fmt.Errorf("find lost transactions in the pending block: %w", err)
	}
	for _, n := range nonces {
		tx, ok := pending[n]
		if !ok {
			break
		}
		found = append(found, tx)
	}
	return found, nil
}

// scanStart finds a block at or before the one that holds nonce first: the block of the
// newest transaction on record below it that the chain has a receipt for; failing that, a
// search of the signer's nonce by block (a node keeping old state answers it); failing
// that, the genesis block.
func (r *Reconciler) scanStart(ctx context.Context, signer string, first uint64) (uint64, error) {
	anchors, err := r.store.RecoveryAnchors(ctx, signer, first, anchorRows)
	if err != nil {
		return 0, err
	}
	if len(anchors) > 0 {
		hashes := make([]common.Hash, len(anchors))
		for i, a := range anchors {
			hashes[i] = a.Hash
		}
		receipts, err := r.chain.TransactionReceipts(ctx, hashes)
		if err != nil {
			return 0, err
		}
		for _, res := range receipts { // newest first
			if res.Receipt != nil {
				return res.Receipt.BlockNumber, nil
			}
		}
		for _, a := range anchors {
			if a.Block > 0 {
				// Recorded before the loss, not confirmed by the node now: a reorganisation may
				// have moved it, so start a margin earlier.
				return a.Block - min(a.Block, r.reorgMargin()), nil
			}
		}
	}
	head, err := r.chain.LatestHeader(ctx)
	if err != nil {
		return 0, err
	}
	if block, ok := r.blockOfNonce(ctx, common.HexToAddress(signer), first, head.Number); ok {
		return block, nil
	}
	r.log.WithContext(ctx).Warnw("msg", "no transaction on record shows where the lost ones start, and the node keeps no old state: reading the chain from its first block",
		"signer", signer, "first_unknown_nonce", first, "head", head.Number)
	return 0, nil
}

// blockOfNonce searches for the first block after which the signer's nonce is above first:
// the block that holds transaction first (the head when it is not mined yet). ok is false
// when the node cannot answer for old blocks.
func (r *Reconciler) blockOfNonce(ctx context.Context, signer common.Address, first, head uint64) (uint64, bool) {
	lo, hi := uint64(0), head
	for lo < hi {
		mid := lo + (hi-lo)/2
		nonce, err := r.chain.NonceAtBlock(ctx, signer, mid)
		if err != nil {
			return 0, false
		}
		if nonce > first {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo, true
}

// reorgMargin is how many blocks below the head may still be replaced: the confirmations
// asked for, and at least a few, re-read each step while a recovery waits at the head.
func (r *Reconciler) reorgMargin() uint64 { return max(r.cfg.Confirmations, minReorgMargin) }

// finishRecovery moves the cursor past the chain's nonce and releases the quarantine
// together, and reports how long the signer was held.
func (r *Reconciler) finishRecovery(ctx context.Context, lease domain.Lease, rec Recovery, missing uint64) error {
	note := fmt.Sprintf("recovery recorded %d transactions from the chain at nonces %d..%d", rec.Recorded, rec.From, rec.To-1)
	if missing > 0 {
		note += fmt.Sprintf("; %d nonces from %d on were not found on chain", missing, rec.RecordedTo)
	}
	released, err := r.store.FinishRecovery(ctx, lease, rec.To, note)
	if err != nil {
		return r.leases.Fence(ctx, lease, err)
	}
	if !released {
		return nil
	}
	held := r.clock.Now().Sub(rec.DetectedAt)
	r.metrics.RecoveryFinished(ctx, held)
	mode := "adopt-by-intent"
	if rec.ReleaseRequested {
		mode = "operator release"
	}
	r.log.WithContext(ctx).Warnw("msg", "signer serves again: every nonce the database lost that the chain shows has its transaction recorded", "signer", lease.Signer,
		"fencing_token", lease.Token, "db_next_nonce", rec.From, "chain_nonce", rec.To, "recorded", rec.Recorded, "missing", missing,
		"quarantined_seconds", held.Seconds(), "released_by", mode)
	services.RecordEvent(ctx, r.store, r.log, services.SignerEvent(domain.EventRecovered, 0, common.HexToAddress(lease.Signer),
		map[string]any{"signer": lease.Signer, "recorded": rec.Recorded, "missing": missing, "quarantinedSeconds": held.Seconds(), "releasedBy": mode}))
	return nil
}

// recoveredRows turns what the chain holds at unknown nonces into rows. A row's intent is
// what the chain ran: recipient, value, data and gas; its fingerprint is that intent's,
// until an adopter gives it its own.
func recoveredRows(signer common.Address, signerHex string, found []services.SentTx, now time.Time) []RecoveredTx {
	rows := make([]RecoveredTx, 0, len(found))
	for _, sent := range found {
		intent := domain.Intent{To: sent.To, Value: pipeline.OrZero(sent.Value), Data: sent.Data, GasLimit: sent.Gas}
		if sent.To != nil {
			intent.ToHex = sent.To.Hex()
		}
		id := uuid.Must(uuid.NewV7())
		tx := domain.ManagedTx{
			ID: id, Signer: signer, SignerHex: signerHex, Nonce: sent.Nonce, Intent: intent, EffectiveGasLimit: sent.Gas,
			Fingerprint: domain.CreateRequest{Signer: signer, Intent: intent}.Fingerprint(),
			State:       domain.StateTracking, TxHash: &sent.Hash, RecoveredAt: &now, CreatedAt: now, UpdatedAt: now,
		}
		attempt := pipeline.SignedAttempt{TxID: id, Hash: sent.Hash, Nonce: sent.Nonce, Kind: pipeline.AttemptOriginal,
			MaxFee: pipeline.OrZero(sent.MaxFee), MaxTip: pipeline.OrZero(sent.MaxTip), GasLimit: sent.Gas, Raw: sent.Raw}
		rows = append(rows, RecoveredTx{Tx: tx, Attempt: attempt})
	}
	return rows
}

// ExpireUnclaimed ends the adoption window of the signer's recovered rows that no retried
// create adopted in time: they stay followed to finality, and their completions, held back
// for an adopter, reach the feed.
func (r *Reconciler) ExpireUnclaimed(ctx context.Context, lease domain.Lease) (int, error) {
	n, err := r.store.ExpireUnclaimed(ctx, lease)
	if err != nil {
		return 0, r.leases.Fence(ctx, lease, err)
	}
	if n > 0 {
		r.metrics.Recovered(ctx, "expired", n)
		r.log.WithContext(ctx).Warnw("msg", "recovered transactions no retried create adopted within the adoption window; their completions go to the feed",
			"signer", lease.Signer, "fencing_token", lease.Token, "count", n, "adoption_window", r.cfg.AdoptionWindow.String())
	}
	return n, nil
}
