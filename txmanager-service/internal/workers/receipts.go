package workers

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ReceiptCheckerConfig tunes receipt look-ups.
type ReceiptCheckerConfig struct {
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
}

// Bounds of reading whole blocks: a gap wider than maxScanBlocks (after a pause, or a node
// that jumped ahead) is left to per-hash look-ups, and every awaiting transaction is still
// looked up by hash at least once per recheckAfter, in case a reorg replaced a block after
// it was read.
const (
	maxScanBlocks      = 32
	recheckAfterPolls  = 20
	minimumRecheckTime = 30 * time.Second
)

// refreshEveryPolls spaces the full re-reads of the schedule. The schedule learns of this
// node's new transactions as they are signed (trackUnsent), of replacements, reorgs and
// reconciliation when those stages ask (RefreshSoon), and of leases gained or lost by
// comparing the held leases on every pass; the periodic re-read is the backstop for
// anything else. Re-read every poll interval, the listing (every awaiting transaction with
// its attempts) was the costliest statement of a busy node: 90 ms for 5,600 rows, each
// second.
const refreshEveryPolls = 10

// ReceiptChecker keeps an in-memory schedule of the transactions awaiting a receipt (for
// the signers this node holds). "Not found" is not an error: the entry is simply due again
// after PollInterval. A look-up error backs the entry off exponentially, which also moves
// it behind everything else, so one bad entry never holds up the rest.
type ReceiptChecker struct {
	cfg     ReceiptCheckerConfig
	tracker *receipts.Tracker
	leases  *services.LeaseManager
	// wakeFinality runs after a pass that recorded receipts or saw a new head while
	// receipts are held for finality.
	wakeFinality func()
	log          *log.Helper
	*Loop

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
	// next is known absent through those too. Written only by pass, under mu.
	scannedThrough uint64
	// blockScanUnsupported: the node has no eth_getBlockReceipts.
	blockScanUnsupported bool
	// headSeen is the head the last pass read. Written only by pass.
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

// NewReceiptChecker builds the checker; wakeFinality runs after a pass that recorded
// receipts, or that saw a new head while receipts are held for finality.
func NewReceiptChecker(cfg ReceiptCheckerConfig, tracker *receipts.Tracker, leases *services.LeaseManager, wakeFinality func(), logger log.Logger) *ReceiptChecker {
	c := &ReceiptChecker{cfg: cfg, tracker: tracker, leases: leases, wakeFinality: wakeFinality, entries: map[uuid.UUID]*receiptEntry{},
		log: log.NewHelper(log.With(logger, "component", "receipts"))}
	// The loop ticks faster than the poll interval so backed-off and fresh entries are
	// picked up close to when they fall due.
	c.Loop = NewLoop(max(cfg.PollInterval/4, 50*time.Millisecond), c.pass)
	return c
}

// RefreshSoon has the next pass re-read the schedule from the database: a stage wrote
// rows awaiting receipts that the schedule does not know (a replacement's hash, a receipt a
// reorg took back, a transaction recovered from the chain).
func (c *ReceiptChecker) RefreshSoon() {
	c.refreshWanted.Store(true)
	c.Wake()
}

func (c *ReceiptChecker) pass(ctx context.Context) {
	// The schedule is re-read from the database only when it may be out of date (see
	// refreshEveryPolls): with thousands in flight the listing costs more than the look-ups
	// it schedules.
	leases := c.leases.Held()
	held := heldLeaseKeys(leases)
	wanted := c.refreshWanted.Swap(false)
	if c.refreshDue(held, wanted, time.Now()) {
		if err := c.refresh(ctx, leases); err != nil {
			if wanted {
				c.refreshWanted.Store(true)
			}
			c.log.Warnw("msg", "listing transactions awaiting receipts failed", "error", err.Error())
			return
		}
		c.refreshedAt, c.refreshedLeases = time.Now(), held
	}
	due := c.dueByTime(time.Now())
	if len(due) == 0 {
		// The tick is faster than the poll interval: most find nothing due.
		c.followHead(ctx)
		return
	}
	head, err := c.tracker.HeadNumber(ctx)
	if err != nil {
		c.log.Warnw("msg", "reading the chain head failed", "error", err.Error())
		return
	}
	newHead := c.sawHead(head)
	mined := c.scanBlocks(ctx, head)
	// A look-up that found nothing is repeated only once a new block may hold the receipt
	// (or, after reading whole blocks, once in a while); the rest go soonest due first
	// (sorted after the filter, which drops most of them).
	now := time.Now()
	recheck := max(minimumRecheckTime, recheckAfterPolls*c.cfg.PollInterval)
	c.mu.Lock()
	due = slices.DeleteFunc(due, func(e *receiptEntry) bool {
		_, still := c.entries[e.tx.TxID] // the block scan may have found it
		return !still || (e.notFound && head <= e.notFoundAtHead && now.Sub(e.lookedUpAt) < recheck)
	})
	slices.SortFunc(due, func(a, b *receiptEntry) int { return a.due.Compare(b.due) })
	c.mu.Unlock()
	if len(due) == 0 {
		c.afterPass(mined, newHead)
		return
	}
	chunks := slices.Collect(slices.Chunk(due, max(c.cfg.BatchSize, 1)))
	work := make(chan []*receiptEntry)
	var wg sync.WaitGroup
	var recorded sync.Mutex
	for range min(max(c.cfg.Workers, 1), len(chunks)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for chunk := range work {
				n := c.check(ctx, chunk, head)
				recorded.Lock()
				mined += n
				recorded.Unlock()
			}
		}()
	}
	for _, chunk := range chunks {
		work <- chunk
	}
	close(work)
	wg.Wait()
	c.afterPass(mined, newHead)
}

// followHead reads the head on a tick with nothing due while receipts are held for
// finality, and wakes finality when the head moved. The block that makes them final
// usually brings no receipt of this node's (the last transfers of a burst are all in the
// block before it), so without this finality saw it only on its own interval: up to that
// interval after the block, for every transaction in the block before. A head read is one
// small call a tick, and only while receipts are held.
func (c *ReceiptChecker) followHead(ctx context.Context) {
	if c.wakeFinality == nil || !c.tracker.HoldsReceipts() {
		return
	}
	head, err := c.tracker.HeadNumber(ctx)
	if err != nil {
		return // finality's own interval still comes; a failing node is logged by the passes that need it
	}
	if c.sawHead(head) {
		c.wakeFinality()
	}
}

// sawHead records head as the last one read and says whether it differs from the one before
// (a lower head, a rollback, is a change finality judges too).
func (c *ReceiptChecker) sawHead(head uint64) bool {
	changed := head != c.headSeen
	c.headSeen = head
	return changed
}

// afterPass wakes finality when the pass recorded receipts, or read a new head while
// receipts are held (followHead).
func (c *ReceiptChecker) afterPass(mined int, newHead bool) {
	if c.wakeFinality != nil && (mined > 0 || newHead && c.tracker.HoldsReceipts()) {
		c.wakeFinality()
	}
}

// refresh syncs the schedule with the database for leases (the ones pass compared, so what
// it records as read is what was read): new transactions are due at once, ones
// that were mined elsewhere, finalized or whose signer this node lost are dropped.
//
// An entry made after the listing began is kept though the listing does not show it: the
// submitter schedules each transaction as it is stored (trackUnsent), and one stored after
// the listing's snapshot is not in it. Dropped, it was found by no block read (those match
// scheduled entries only) until the next re-read, up to refreshEveryPolls later, which then
// looked it up by hash, a search of its block by the node: in bench-chain each re-read
// during the run dropped 150-250 transactions signed while it ran, and the last ones held
// up the end of the run by seconds.
func (c *ReceiptChecker) refresh(ctx context.Context, leases []domain.Lease) error {
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
func (c *ReceiptChecker) refreshDue(held []string, wanted bool, now time.Time) bool {
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
func (c *ReceiptChecker) dueByTime(now time.Time) []*receiptEntry {
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

// check looks one chunk up and reschedules its entries; it returns receipts recorded.
func (c *ReceiptChecker) check(ctx context.Context, chunk []*receiptEntry, head uint64) int {
	txs := make([]pipeline.TrackedTx, len(chunk))
	byID := make(map[uuid.UUID]*receiptEntry, len(chunk))
	for i, e := range chunk {
		txs[i] = e.tx
		byID[e.tx.TxID] = e
	}
	outcome, err := c.tracker.CheckReceipts(ctx, txs)
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warnw("msg", "receipt look-up failed; backing off", "count", len(chunk), "error", err.Error())
		}
		c.backOff(chunk, now)
		return 0
	}
	written, err := c.tracker.RecordReceipts(ctx, outcome.Found, head)
	if err != nil && ctx.Err() == nil { // a cancelled context is shutdown, not a failure
		c.log.Warnw("msg", "recording receipts failed", "error", err.Error())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range outcome.Found {
		delete(c.entries, f.TxID) // mined; finality takes it from here
	}
	for _, id := range outcome.NotFound {
		if e, ok := byID[id]; ok {
			e.failures, e.due = 0, now.Add(c.cfg.PollInterval)
			e.notFound, e.notFoundAtHead, e.lookedUpAt = true, head, now
		}
	}
	for _, id := range outcome.Failed {
		if e, ok := byID[id]; ok {
			c.retryLater(e, now)
		}
	}
	return written
}

// scanBlocks reads the receipts of the blocks after scannedThrough up to head whole, when
// enough transactions await receipts for that to be cheaper than a look-up per hash, and
// records the ones found. Entries known absent through scannedThrough and not in those
// blocks become known absent through them, so no per-hash look-up repeats for them. It
// returns the receipts recorded.
func (c *ReceiptChecker) scanBlocks(ctx context.Context, head uint64) int {
	c.mu.Lock()
	from := c.scannedThrough
	switch {
	case head < from:
		// The chain is behind what was covered (a head read from a fork, a sequencer that
		// rolled back): blocks above head may come again with other contents, so nothing is
		// known absent from them any more.
		c.scannedThrough = head
		for _, e := range c.entries {
			e.notFoundAtHead = min(e.notFoundAtHead, head)
		}
		c.mu.Unlock()
		return 0
	case head == from:
		c.mu.Unlock()
		return 0 // nothing new
	case from == 0 || head-from > maxScanBlocks || c.blockScanUnsupported ||
		c.cfg.BlockScanMinPending <= 0 || len(c.entries) < c.cfg.BlockScanMinPending:
		c.scannedThrough = head // per-hash look-ups cover these blocks
		c.mu.Unlock()
		return 0
	}
	txs := make([]pipeline.TrackedTx, 0, len(c.entries))
	for _, e := range c.entries {
		txs = append(txs, e.tx)
	}
	c.mu.Unlock()
	scan, err := c.tracker.ReceiptsInBlocks(ctx, txs, from, head)
	switch {
	case errors.Is(err, services.ErrNotSupported):
		c.log.Infow("msg", "the node cannot return a block's receipts at once; looking receipts up by hash", "error", err.Error())
		c.blockScanUnsupported = true
		return 0
	case err != nil:
		if ctx.Err() == nil {
			c.log.Warnw("msg", "reading block receipts failed", "from", from+1, "to", head, "error", err.Error())
		}
		return 0
	}
	written, err := c.tracker.RecordReceipts(ctx, scan.Found, head)
	if err != nil && ctx.Err() == nil {
		c.log.Warnw("msg", "recording receipts failed", "error", err.Error())
	}
	found := make(map[uuid.UUID]bool, len(scan.Found))
	for _, f := range scan.Found {
		found[f.TxID] = true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Every entry, not only the ones read before the call: one trackUnsent scheduled
	// meanwhile (known absent through from) was sent after head was read, so it cannot be in
	// the blocks just read either.
	for id, e := range c.entries {
		switch {
		case found[id]:
			delete(c.entries, id) // mined; finality takes it from here
		case e.notFound && e.notFoundAtHead >= from:
			e.notFoundAtHead = max(e.notFoundAtHead, scan.Through)
		}
	}
	c.scannedThrough = scan.Through
	return written
}

// trackUnsent schedules transactions signed and stored but not yet sent by this node as
// known absent through the blocks already covered: those were built before the bytes
// existed, so asking for each receipt by hash before the next block would only load the
// node (a look-up by hash makes it search a block's body for the transaction). Scheduled
// before the broadcast, they are part of every block read whole from now on; the first
// look-up once a new head is seen, or the periodic recheck after a reorg, covers the rest.
// Before any block is covered they are simply due: this is how the schedule learns of
// this node's new transactions, not from a re-read of the database.
func (c *ReceiptChecker) trackUnsent(txs []pipeline.TrackedTx) {
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

func (c *ReceiptChecker) backOff(chunk []*receiptEntry, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range chunk {
		c.retryLater(e, now)
	}
}

// retryLater counts a failed look-up and pushes the entry back exponentially; c.mu held.
func (c *ReceiptChecker) retryLater(e *receiptEntry, now time.Time) {
	e.failures++
	d := c.cfg.PollInterval << min(e.failures, 16)
	if c.cfg.MaxBackoff > 0 && d > c.cfg.MaxBackoff {
		d = c.cfg.MaxBackoff
	}
	e.due = now.Add(d)
}
