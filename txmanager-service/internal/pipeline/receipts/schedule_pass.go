package receipts

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Pass looks up what is due for the leases this node holds, and says whether finality
// should run now: receipts were recorded, or a new head came while receipts are held for
// finality.
func (c *Schedule) Pass(ctx context.Context, leases []domain.Lease) (wakeFinality bool) {
	// The schedule is re-read from the database only when it may be out of date (see
	// refreshEveryPolls): with thousands in flight the listing costs more than the look-ups
	// it schedules.
	held := heldLeaseKeys(leases)
	wanted := c.refreshWanted.Swap(false)
	if c.refreshDue(held, wanted, time.Now()) {
		if err := c.refresh(ctx, leases); err != nil {
			if wanted {
				c.refreshWanted.Store(true)
			}
			c.log.Warnw("msg", "listing transactions awaiting receipts failed", "error", err.Error())
			return false
		}
		c.refreshedAt, c.refreshedLeases = time.Now(), held
	}
	due := c.dueByTime(time.Now())
	if len(due) == 0 {
		// The tick is faster than the poll interval: most find nothing due.
		return c.followHead(ctx)
	}
	head, err := c.tracker.HeadNumber(ctx)
	if err != nil {
		c.log.Warnw("msg", "reading the chain head failed", "error", err.Error())
		return false
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
		return c.finalityDue(mined, newHead)
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
	return c.finalityDue(mined, newHead)
}

// followHead reads the head on a tick with nothing due while receipts are held for
// finality, and says finality should run when the head moved. The block that makes them
// final usually brings no receipt of this node's (the last transfers of a burst are all in
// the block before it), so without this finality saw it only on its own interval: up to
// that interval after the block, for every transaction in the block before. A head read is
// one small call a tick, and only while receipts are held.
func (c *Schedule) followHead(ctx context.Context) bool {
	if !c.tracker.HoldsReceipts() {
		return false
	}
	head, err := c.tracker.HeadNumber(ctx)
	if err != nil {
		return false // finality's own interval still comes; a failing node is logged by the passes that need it
	}
	return c.sawHead(head)
}

// sawHead records head as the last one read and says whether it differs from the one before
// (a lower head, a rollback, is a change finality judges too).
func (c *Schedule) sawHead(head uint64) bool {
	changed := head != c.headSeen
	c.headSeen = head
	return changed
}

// finalityDue: the pass recorded receipts, or read a new head while receipts are held
// (followHead).
func (c *Schedule) finalityDue(mined int, newHead bool) bool {
	return mined > 0 || newHead && c.tracker.HoldsReceipts()
}

// check looks one chunk up and reschedules its entries; it returns receipts recorded.
func (c *Schedule) check(ctx context.Context, chunk []*receiptEntry, head uint64) int {
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
	unrecorded, warn := notRecorded(err)
	if warn && ctx.Err() == nil { // a cancelled context is shutdown, not a failure
		c.log.Warnw("msg", "recording receipts failed", "error", err.Error())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range outcome.Found {
		if unrecorded(f) {
			// Not known to be on record: looked up again at once rather than left to the
			// backstop re-read (a write already made is not made twice).
			if e, ok := byID[f.TxID]; ok {
				e.due = now
			}
			continue
		}
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
func (c *Schedule) scanBlocks(ctx context.Context, head uint64) int {
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
	case from == 0 || head-from > maxScanBlocks || time.Now().Before(c.blockScanOffUntil) ||
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
		retry := c.cfg.BlockScanRetry
		if retry <= 0 {
			retry = defaultBlockScanRetry
		}
		c.log.Infow("msg", "the node cannot return a block's receipts at once; looking receipts up by hash", "retryAfter", retry.String(), "error", err.Error())
		c.mu.Lock()
		c.blockScanOffUntil = time.Now().Add(retry)
		c.mu.Unlock()
		return 0
	case err != nil:
		if ctx.Err() == nil {
			c.log.Warnw("msg", "reading block receipts failed", "from", from+1, "to", head, "error", err.Error())
		}
		return 0
	}
	written, err := c.tracker.RecordReceipts(ctx, scan.Found, head)
	unrecorded, warn := notRecorded(err)
	if warn && ctx.Err() == nil {
		c.log.Warnw("msg", "recording receipts failed", "error", err.Error())
	}
	// found: whether each receipt found is on record (false: looked up again by its hash).
	found := make(map[uuid.UUID]bool, len(scan.Found))
	for _, f := range scan.Found {
		found[f.TxID] = !unrecorded(f)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	// Every entry, not only the ones read before the call: one TrackUnsent scheduled
	// meanwhile (known absent through from) was sent after head was read, so it cannot be in
	// the blocks just read either.
	for id, e := range c.entries {
		recorded, wasFound := found[id]
		switch {
		case wasFound && !recorded:
			e.due = time.Now() // not known to be on record: looked up again by its hash
		case wasFound:
			delete(c.entries, id) // mined; finality takes it from here
		case e.notFound && e.notFoundAtHead >= from:
			e.notFoundAtHead = max(e.notFoundAtHead, scan.Through)
		}
	}
	c.scannedThrough = scan.Through
	return written
}
