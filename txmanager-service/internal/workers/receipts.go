package workers

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

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
}

// ReceiptChecker keeps an in-memory schedule of the transactions awaiting a receipt (for
// the signers this node holds). "Not found" is not an error: the entry is simply due again
// after PollInterval. A look-up error backs the entry off exponentially, which also moves
// it behind everything else, so one bad entry never holds up the rest.
type ReceiptChecker struct {
	cfg      ReceiptCheckerConfig
	pipeline *services.Pipeline
	leases   *services.LeaseManager
	onMined  func()
	log      *log.Helper
	*Loop

	mu          sync.Mutex
	entries     map[uuid.UUID]*receiptEntry
	refreshedAt time.Time
}

type receiptEntry struct {
	tx       services.TrackedTx
	due      time.Time
	failures int
	// notFoundAtHead is the head a "not found" answer was given at: asking again before a
	// new block only repeats the answer and loads the node for nothing.
	notFoundAtHead uint64
	notFound       bool
}

// NewReceiptChecker builds the checker; onMined runs after a pass that recorded receipts.
func NewReceiptChecker(cfg ReceiptCheckerConfig, pipeline *services.Pipeline, leases *services.LeaseManager, onMined func(), logger log.Logger) *ReceiptChecker {
	c := &ReceiptChecker{cfg: cfg, pipeline: pipeline, leases: leases, onMined: onMined, entries: map[uuid.UUID]*receiptEntry{},
		log: log.NewHelper(log.With(logger, "component", "receipts"))}
	// The loop ticks faster than the poll interval so backed-off and fresh entries are
	// picked up close to when they fall due.
	c.Loop = NewLoop(max(cfg.PollInterval/4, 50*time.Millisecond), c.pass)
	return c
}

func (c *ReceiptChecker) pass(ctx context.Context) {
	// The schedule is re-read from the database once per poll interval, not on every tick:
	// with thousands in flight the listing costs more than the look-ups it schedules.
	if time.Since(c.refreshedAt) >= c.cfg.PollInterval {
		if err := c.refresh(ctx); err != nil {
			c.log.Warnw("msg", "listing transactions awaiting receipts failed", "error", err.Error())
			return
		}
		c.refreshedAt = time.Now()
	}
	due := c.dueByTime(time.Now())
	if len(due) == 0 {
		return // the tick is faster than the poll interval: most find nothing due
	}
	head, err := c.pipeline.HeadNumber(ctx)
	if err != nil {
		c.log.Warnw("msg", "reading the chain head failed", "error", err.Error())
		return
	}
	// A look-up that found nothing is repeated only once a new block may hold the receipt;
	// the rest go soonest due first (sorted after the filter, which drops most of them).
	c.mu.Lock()
	due = slices.DeleteFunc(due, func(e *receiptEntry) bool { return e.notFound && head <= e.notFoundAtHead })
	slices.SortFunc(due, func(a, b *receiptEntry) int { return a.due.Compare(b.due) })
	c.mu.Unlock()
	if len(due) == 0 {
		return
	}
	chunks := slices.Collect(slices.Chunk(due, max(c.cfg.BatchSize, 1)))
	work := make(chan []*receiptEntry)
	var wg sync.WaitGroup
	var recorded sync.Mutex
	mined := 0
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
	if mined > 0 && c.onMined != nil {
		c.onMined()
	}
}

// refresh syncs the schedule with the database: new transactions are due at once, ones
// that were mined elsewhere, finalized or whose signer this node lost are dropped.
func (c *ReceiptChecker) refresh(ctx context.Context) error {
	signers := c.leases.HeldSigners()
	var txs []services.TrackedTx
	if len(signers) > 0 {
		var err error
		if txs, err = c.pipeline.AwaitingReceipt(ctx, signers); err != nil {
			return err
		}
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := make(map[uuid.UUID]bool, len(txs))
	for _, tx := range txs {
		seen[tx.TxID] = true
		if e, ok := c.entries[tx.TxID]; ok {
			e.tx = tx // attempts may have grown (a replacement)
			continue
		}
		c.entries[tx.TxID] = &receiptEntry{tx: tx, due: now}
	}
	for id := range c.entries {
		if !seen[id] {
			delete(c.entries, id)
		}
	}
	return nil
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
	txs := make([]services.TrackedTx, len(chunk))
	byID := make(map[uuid.UUID]*receiptEntry, len(chunk))
	for i, e := range chunk {
		txs[i] = e.tx
		byID[e.tx.TxID] = e
	}
	outcome, err := c.pipeline.CheckReceipts(ctx, txs)
	now := time.Now()
	if err != nil {
		if ctx.Err() == nil {
			c.log.Warnw("msg", "receipt look-up failed; backing off", "count", len(chunk), "error", err.Error())
		}
		c.backOff(chunk, now)
		return 0
	}
	written, err := c.pipeline.RecordReceipts(ctx, outcome.Found)
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
			e.notFound, e.notFoundAtHead = true, head
		}
	}
	for _, id := range outcome.Failed {
		if e, ok := byID[id]; ok {
			c.retryLater(e, now)
		}
	}
	return written
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
