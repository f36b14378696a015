package receipts

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
)

// ScheduleConfig tunes receipt look-ups.
type ScheduleConfig struct {
	// PollInterval: a transaction the node has no receipt for is looked up again after this.
	PollInterval time.Duration
	// Workers look up chunks concurrently; each chunk is one batched request.
	Workers   int
	BatchSize int
	// MaxBackoff caps the delay after repeated look-up errors.
	MaxBackoff time.Duration
	// BlockScanMinPending: with at least this many awaiting receipts, each new block's
	// receipts are read whole (one call per block) instead of one look-up per hash per
	// block; 0 never reads whole blocks.
	BlockScanMinPending int
	// BlockScanRetry: after a node answered that it cannot return a block's receipts at
	// once, receipts are looked up by hash for this long, then whole blocks are tried again
	// (an endpoint behind a balancer, or one that is upgraded, may answer otherwise later).
	BlockScanRetry time.Duration
}

// Bounds of reading whole blocks: a gap wider than maxScanBlocks (after a pause, or a node
// that jumped ahead) is left to per-hash look-ups, and every awaiting transaction is still
// looked up by hash at least once per recheckAfter, in case a reorg replaced a block after
// it was read.
const (
	maxScanBlocks      = 32
	recheckAfterPolls  = 20
	minimumRecheckTime = 30 * time.Second
	// defaultBlockScanRetry is BlockScanRetry when none is set.
	defaultBlockScanRetry = 5 * time.Minute
)

// refreshEveryPolls spaces the full re-reads of the schedule. The schedule learns of this
// node's new transactions as they are signed (TrackUnsent), of replacements, reorgs and
// reconciliation when those stages ask (RefreshSoon), and of leases gained or lost by
// comparing the held leases on every pass; the periodic re-read is the backstop for
// anything else. Re-read every poll interval, the listing (every awaiting transaction with
// its attempts) was the costliest statement of a busy node: 90 ms for 5,600 rows, each
// second.
const refreshEveryPolls = 10

// Schedule keeps in memory the transactions awaiting a receipt (for the signers this node
// holds) and looks them up when they fall due: by hash, or, with many awaiting, by reading
// each new block's receipts whole. "Not found" is not an error: the entry is simply due
// again after PollInterval. A look-up error backs the entry off exponentially, which also
// moves it behind everything else, so one bad entry never holds up the rest. A loop (in
// workers) runs Pass; nothing else drives it.
type Schedule struct {
	cfg     ScheduleConfig
	tracker *Tracker
	log     *log.Helper

	mu          sync.Mutex
	entries     map[uuid.UUID]*receiptEntry
	refreshedAt time.Time
	// refreshedLeases are the leases (signer and token) the last refresh read for: another
	// set means rows this node did not write may await receipts, or entries are no longer
	// this node's to look up.
	refreshedLeases []string
	refreshWanted   atomic.Bool
	// scannedThrough is the last block whose receipts were read whole (or the head when
	// reading was skipped): an entry known absent through it and not in the blocks read
	// next is known absent through those too. Written only by Pass, under mu.
	scannedThrough uint64
	// blockScanOffUntil: the node said it has no eth_getBlockReceipts; whole blocks are
	// not read before this time.
	blockScanOffUntil time.Time
	// headSeen is the head the last pass read. Written only by Pass.
	headSeen uint64
}

type receiptEntry struct {
	tx       pipeline.TrackedTx
	due      time.Time
	failures int
	// notFoundAtHead is the head a "not found" answer was given at: asking again before a
	// new block only repeats the answer and loads the node for nothing.
	notFoundAtHead uint64
	notFound       bool
	// lookedUpAt is the last look-up by hash.
	lookedUpAt time.Time
	// scheduledAt is when the entry was made: a re-read of the database removes only
	// entries older than its listing.
	scheduledAt time.Time
}

// NewSchedule builds the schedule over the stage's tracker.
func NewSchedule(cfg ScheduleConfig, tracker *Tracker, logger log.Logger) *Schedule {
	return &Schedule{cfg: cfg, tracker: tracker, entries: map[uuid.UUID]*receiptEntry{}, log: log.NewHelper(log.With(logger, "component", "receipts"))}
}

// Tick is how often its loop should run Pass: faster than the poll interval, so backed-off
// and fresh entries are picked up close to when they fall due.
func (c *Schedule) Tick() time.Duration { return max(c.cfg.PollInterval/4, 50*time.Millisecond) }

// RefreshSoon has the next pass re-read the schedule from the database: a stage wrote
// rows awaiting receipts that the schedule does not know (a replacement's hash, a receipt a
// reorg took back, a transaction recovered from the chain). The caller wakes the loop.
func (c *Schedule) RefreshSoon() { c.refreshWanted.Store(true) }

// refresh syncs the schedule with the database for leases (the ones pass compared, so what
// it records as read is what was read): new transactions are due at once, ones
// that were mined elsewhere, finalized or whose signer this node lost are dropped.
//
// An entry made after the listing began is kept though the listing does not show it: the
// submitter schedules each transaction as it is stored (TrackUnsent), and one stored after
// the listing's snapshot is not in it. Dropped, it was found by no block read (those match
// scheduled entries only) until the next re-read, up to refreshEveryPolls later, which then
// looked it up by hash, a search of its block by the node: in bench-chain each re-read
// during the run dropped 150-250 transactions signed while it ran, and the last ones held
// up the end of the run by seconds.
func (c *Schedule) refresh(ctx context.Context, leases []domain.Lease) error {
	signers := domain.LeaseSigners(leases)
	listedAt := time.Now()
	var txs []pipeline.TrackedTx
	if len(signers) > 0 {
		var err error
		if txs, err = c.tracker.AwaitingReceipt(ctx, signers); err != nil {
			return err
		}
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[uuid.UUID]bool, len(txs))
	for _, tx := range txs { // none whose receipt is held: found, written when final
		seen[tx.TxID] = true
		if e, ok := c.entries[tx.TxID]; ok {
			if len(tx.Attempts) != len(e.tx.Attempts) {
				// A replacement: blocks already read were not searched for its hash.
				e.notFound = false
			}
			e.tx = tx
			continue
		}
		c.entries[tx.TxID] = &receiptEntry{tx: tx, due: now, scheduledAt: now}
	}
	for id, e := range c.entries {
		if !seen[id] && e.scheduledAt.Before(listedAt) {
			delete(c.entries, id)
		}
	}
	return nil
}

// refreshDue says whether the schedule must be re-read now: never read, a stage asked
// (wanted), the held leases changed since, or the backstop's time has come.
func (c *Schedule) refreshDue(held []string, wanted bool, now time.Time) bool {
	return wanted || c.refreshedAt.IsZero() || !slices.Equal(held, c.refreshedLeases) ||
		now.Sub(c.refreshedAt) >= refreshEveryPolls*c.cfg.PollInterval
}

// heldLeaseKeys names each held lease by signer and token, sorted.
func heldLeaseKeys(held []domain.Lease) []string {
	keys := make([]string, len(held))
	for i, l := range held {
		keys[i] = l.Signer + "/" + strconv.FormatUint(l.Token, 10)
	}
	slices.Sort(keys)
	return keys
}

// dueByTime lists the entries whose time has come, in no particular order.
func (c *Schedule) dueByTime(now time.Time) []*receiptEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due []*receiptEntry
	for _, e := range c.entries {
		if !e.due.After(now) {
			due = append(due, e)
		}
	}
	return due
}

// TrackUnsent schedules transactions signed and stored but not yet sent by this node as
// known absent through the blocks already covered: those were built before the bytes
// existed, so asking for each receipt by hash before the next block would only load the
// node (a look-up by hash makes it search a block's body for the transaction). Scheduled
// before the broadcast, they are part of every block read whole from now on; the first
// look-up once a new head is seen, or the periodic recheck after a reorg, covers the rest.
// Before any block is covered they are simply due: this is how the schedule learns of
// this node's new transactions, not from a re-read of the database.
func (c *Schedule) TrackUnsent(txs []pipeline.TrackedTx) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, tx := range txs {
		if _, known := c.entries[tx.TxID]; known {
			continue
		}
		e := &receiptEntry{tx: tx, due: now, scheduledAt: now}
		if c.scannedThrough > 0 {
			e.notFound, e.notFoundAtHead, e.lookedUpAt = true, c.scannedThrough, now
		}
		c.entries[tx.TxID] = e
	}
}

func (c *Schedule) backOff(chunk []*receiptEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range chunk {
		c.retryLater(e, now)
	}
}

// retryLater counts a failed look-up and pushes the entry back exponentially; c.mu held.
func (c *Schedule) retryLater(e *receiptEntry, now time.Time) {
	e.failures++
	d := c.cfg.PollInterval << min(e.failures, 16)
	if c.cfg.MaxBackoff > 0 && d > c.cfg.MaxBackoff {
		d = c.cfg.MaxBackoff
	}
	e.due = now.Add(d)
}
