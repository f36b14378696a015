// Package receipts is the pipeline stage that follows broadcast transactions to a final
// state: it finds the receipt of whichever attempt was mined (by hash, or by reading whole
// blocks when many are in flight), and judges each mined transaction against one view of
// the chain per pass, back to TRACKING when its block left the canonical chain, final
// (CONFIRMED or FAILED_FINAL, with its completion) when enough blocks are on top of it.
package receipts

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Config tunes finality.
type Config struct {
	// Confirmations required for finality (when UseFinalizedTag is false).
	Confirmations uint64
	// UseFinalizedTag: final when the node's "finalized" block has reached the receipt.
	UseFinalizedTag bool
	// LostAboveHeadAfter is how long a receipt's block may stay above the chain's head before
	// the receipt is forgotten as reorged (0: defaultLostAboveHeadAfter).
	LostAboveHeadAfter time.Duration
	// CatchUpBeyond and CatchUpPerPass tune the proof of receipts far below the finalized
	// block (catch_up.go; 0: defaultCatchUpBeyond, defaultCatchUpPerPass).
	CatchUpBeyond  uint64
	CatchUpPerPass int
}

// FoundReceipt is a receipt for one attempt of a tracked transaction.
type FoundReceipt struct {
	TxID    uuid.UUID
	Signer  string
	Nonce   uint64
	Kind    pipeline.AttemptKind
	Receipt services.Receipt
}

// MinedTx has a receipt and is not final yet.
type MinedTx struct {
	TxID        uuid.UUID
	Signer      string
	Nonce       uint64
	BlockNumber uint64
	BlockHash   common.Hash
	Status      uint64
	Kind        pipeline.AttemptKind
	// Cost is what the receipt says the transaction cost (its hash and block aside).
	Cost domain.ReceiptSummary
	// Held is the receipt when it is held in memory (hold.go), nil when it is on record.
	Held *FoundReceipt
}

// Finalization is a mined transaction reaching its final state.
type Finalization struct {
	Tx       MinedTx
	State    domain.State
	SubState domain.SubState
}

// Store is the stage's view of the database. Every write is fenced on the lease and yields
// *domain.FencedError when the lease no longer matches.
type Store interface {
	ListAwaitingReceipt(ctx context.Context, signers []string) ([]pipeline.TrackedTx, error)
	RecordReceipts(ctx context.Context, lease domain.Lease, found []FoundReceipt) (int, error)
	ListMined(ctx context.Context, signers []string) ([]MinedTx, error)
	RevertReorged(ctx context.Context, lease domain.Lease, txs []MinedTx) (int, error)
	// Finalize writes the final states together with their completions.
	Finalize(ctx context.Context, lease domain.Lease, finals []Finalization) (int, error)
}

// Tracker runs the stage for the signers whose lease this node holds.
type Tracker struct {
	cfg     Config
	store   Store
	chain   services.ReceiptSource
	leases  *services.LeaseManager
	metrics *telemetry.Metrics
	log     *log.Helper
	held    heldReceipts
	above   aboveHead
	catchUp catchUp
}

// New builds the stage.
func New(cfg Config, store Store, chain services.ReceiptSource, leases *services.LeaseManager, metrics *telemetry.Metrics, logger log.Logger) *Tracker {
	return &Tracker{cfg: cfg, store: store, chain: chain, leases: leases, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node()))}
}

// AwaitingReceipt lists the broadcast, unmined transactions of the signers whose receipt
// is not held (hold.go): those are found, and written with their final state.
//
// A receipt held when the listing starts is left out even when its hold ends before the
// listing does: a finality pass that commits meanwhile makes the row final and releases the
// hold, yet the listing, a snapshot from before that commit, still shows the row awaiting
// its receipt. Put back on the schedule, each such row was looked up again by hash, and a
// node finds a mined transaction by hashing the transactions of its block until it meets
// it (6,000 in a bench-chain block; the listing takes 95 ms there). A hold that ends for any
// other reason does not need this listing:
// one dropped because its block left the chain has finality ask for a fresh listing after
// the release (ReceiptChecker.RefreshSoon), and one written as a plain receipt when held
// too long is no longer awaiting.
func (t *Tracker) AwaitingReceipt(ctx context.Context, signers []string) ([]pipeline.TrackedTx, error) {
	heldAtStart := t.held.ids()
	txs, err := t.store.ListAwaitingReceipt(ctx, signers)
	if err != nil {
		return nil, err
	}
	heldNow := t.held.ids()
	return slices.DeleteFunc(txs, func(tx pipeline.TrackedTx) bool {
		_, wasHeld := heldAtStart[tx.TxID]
		_, isHeld := heldNow[tx.TxID]
		return wasHeld || isHeld
	}), nil
}

// HoldsReceipts says whether receipts found are held for their final write: the next block
// may make them final.
func (t *Tracker) HoldsReceipts() bool { return t.held.any() }

// HeadNumber is the chain's current block number.
func (t *Tracker) HeadNumber(ctx context.Context) (uint64, error) {
	head, err := t.chain.LatestHeader(ctx)
	if err != nil {
		return 0, err
	}
	return head.Number, nil
}

// Outcome sorts one look-up pass: what was mined, what the node does not have yet, and
// what could not be looked up.
type Outcome struct {
	Found    []FoundReceipt
	NotFound []uuid.UUID
	Failed   []uuid.UUID
}

// CheckReceipts looks up the receipts of every attempt of txs in batched calls (the chain
// adapter packs them into JSON-RPC batches). A receipt for ANY attempt counts: a
// replacement or cancellation may be the one that was mined.
func (t *Tracker) CheckReceipts(ctx context.Context, txs []pipeline.TrackedTx) (Outcome, error) {
	ctx, span := t.metrics.Tracer.Start(ctx, "pipeline.receipts", trace.WithAttributes(attribute.Int("txs", len(txs))))
	defer span.End()
	var hashes []common.Hash
	for _, tx := range txs {
		for _, a := range tx.Attempts {
			hashes = append(hashes, a.Hash)
		}
	}
	results, err := t.chain.TransactionReceipts(ctx, hashes)
	if err != nil {
		for range txs {
			t.metrics.ReceiptCheck(ctx, "error")
		}
		return Outcome{}, err
	}
	out := sortReceipts(txs, results)
	t.countLookups(ctx, out)
	return out, nil
}

func (t *Tracker) countLookups(ctx context.Context, out Outcome) {
	for range out.Found {
		t.metrics.ReceiptCheck(ctx, "found")
	}
	for range out.Failed {
		t.metrics.ReceiptCheck(ctx, "error")
	}
	for range out.NotFound {
		t.metrics.ReceiptCheck(ctx, "not_found")
	}
}

// sortReceipts reads the per-hash results (one per attempt of each tx, in order): the
// first receipt found for any attempt settles the tx; without one, a look-up error makes
// it Failed, else NotFound.
func sortReceipts(txs []pipeline.TrackedTx, results []services.ReceiptResult) Outcome {
	var out Outcome
	i := 0
	for _, tx := range txs {
		var found *FoundReceipt
		failed := false
		for _, attempt := range tx.Attempts {
			r := results[i]
			i++
			switch {
			case r.Receipt != nil && found == nil:
				found = &FoundReceipt{TxID: tx.TxID, Signer: tx.Signer, Nonce: tx.Nonce, Kind: attempt.Kind, Receipt: *r.Receipt}
			case r.Err != nil:
				failed = true
			}
		}
		switch {
		case found != nil:
			out.Found = append(out.Found, *found)
		case failed:
			out.Failed = append(out.Failed, tx.TxID)
		default:
			out.NotFound = append(out.NotFound, tx.TxID)
		}
	}
	return out
}

// BlockScan is what reading whole blocks' receipts found.
type BlockScan struct {
	Found []FoundReceipt
	// Through is the last block read; blocks after from up to it were all read. When the
	// endpoint did not have the first block yet it is from itself (nothing was read).
	Through uint64
}

// ReceiptsInBlocks reads the receipts of blocks from+1..to (one call per block) and picks
// those of txs' attempts: with many transactions in flight this replaces a look-up per
// hash, which costs the node a search of the whole block each. Reading stops at the first
// block the endpoint does not have. ErrNotSupported: the node has no eth_getBlockReceipts.
func (t *Tracker) ReceiptsInBlocks(ctx context.Context, txs []pipeline.TrackedTx, from, to uint64) (BlockScan, error) {
	ctx, span := t.metrics.Tracer.Start(ctx, "pipeline.block_receipts", trace.WithAttributes(attribute.Int("txs", len(txs)), attribute.Int64("blocks", int64(to-from))))
	defer span.End()
	if to <= from {
		return BlockScan{Through: from}, nil
	}
	numbers := make([]uint64, 0, to-from)
	for n := from + 1; n <= to; n++ {
		numbers = append(numbers, n)
	}
	blocks, err := t.chain.BlockReceipts(ctx, numbers)
	if err != nil {
		return BlockScan{Through: from}, err
	}
	scan := matchBlocks(txs, from, numbers, blocks)
	for range scan.Found {
		t.metrics.ReceiptCheck(ctx, "found")
	}
	return scan, nil
}

// matchBlocks picks, from the receipts of the blocks numbers (nil: a block the endpoint
// does not have yet, where reading stops), those of txs' attempts, one per tx.
func matchBlocks(txs []pipeline.TrackedTx, from uint64, numbers []uint64, blocks [][]services.Receipt) BlockScan {
	scan := BlockScan{Through: from}
	type owner struct {
		tx   *pipeline.TrackedTx
		kind pipeline.AttemptKind
	}
	ours := make(map[common.Hash]owner, len(txs))
	for i := range txs {
		for _, a := range txs[i].Attempts {
			ours[a.Hash] = owner{&txs[i], a.Kind}
		}
	}
	found := map[uuid.UUID]bool{}
	for i, receipts := range blocks {
		if receipts == nil {
			break // the endpoint is not at this height yet
		}
		scan.Through = numbers[i]
		for _, r := range receipts {
			if o, ok := ours[r.TxHash]; ok && !found[o.tx.TxID] {
				found[o.tx.TxID] = true
				scan.Found = append(scan.Found, FoundReceipt{TxID: o.tx.TxID, Signer: o.tx.Signer, Nonce: o.tx.Nonce, Kind: o.kind, Receipt: r})
			}
		}
	}
	return scan
}

// RecordReceipts takes found receipts, looked up with the chain at head: those close to
// finality are held, to be written with the final state (hold.go); the rest are written,
// signer by signer, with the leases this node holds (receipts of signers whose lease it
// cannot trust now are left, and the error then matches ErrLeaseNotTrusted). It returns how
// many were held or written.
func (t *Tracker) RecordReceipts(ctx context.Context, found []FoundReceipt, head uint64) (int, error) {
	var toWrite []FoundReceipt
	held := 0
	for _, f := range found {
		if holdable(t.cfg, f, head) {
			t.held.hold(f, time.Now())
			held++
			continue
		}
		toWrite = append(toWrite, f)
	}
	written, err := t.writeReceipts(ctx, toWrite)
	return held + written, err
}

// writeReceipts writes receipts as MINED, each signer's with the lease this node holds.
func (t *Tracker) writeReceipts(ctx context.Context, found []FoundReceipt) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	ctx, span := t.metrics.Tracer.Start(ctx, "pipeline.record_receipts", trace.WithAttributes(attribute.Int("receipts", len(found))))
	defer span.End()
	bySigner := map[string][]FoundReceipt{}
	for _, f := range found {
		bySigner[f.Signer] = append(bySigner[f.Signer], f)
	}
	unheld := map[uuid.UUID]bool{}
	n, err := writeHeld(ctx, t.leases, bySigner, t.store.RecordReceipts, func(lease domain.Lease, n int, group []FoundReceipt) {
		t.log.WithContext(ctx).Infow("msg", "receipts recorded", "signer", lease.Signer, "fencing_token", lease.Token, "count", n,
			"first_tx_id", group[0].TxID.String(), "sub_state", "MINED")
	}, func(signer string) {
		for _, f := range bySigner[signer] {
			unheld[f.TxID] = true
		}
	})
	if len(unheld) > 0 {
		return n, &notRecordedError{unheld: unheld, err: err}
	}
	return n, err
}

// notRecordedError: the receipts of the transactions in unheld were not written, their
// signers' leases not trusted at that moment (an expiry just ahead of its renewal, or a
// lease lost), besides err, if any, for the others. The schedule looks those up again
// rather than forgetting them: a lease trusted again at the next pass, as it was when the
// schedule was last read, would not make it read them again until its backstop.
type notRecordedError struct {
	unheld map[uuid.UUID]bool
	err    error
}

func (e *notRecordedError) Error() string {
	msg := fmt.Sprintf("%d receipts not written: their signers' leases were not trusted at the moment", len(e.unheld))
	if e.err != nil {
		msg += "; " + e.err.Error()
	}
	return msg
}

func (e *notRecordedError) Unwrap() error { return e.err }

// Is makes a notRecordedError match ErrLeaseNotTrusted.
func (e *notRecordedError) Is(target error) bool { return target == ErrLeaseNotTrusted }

// ErrLeaseNotTrusted: RecordReceipts left some receipts unwritten, their signers' leases
// not trusted at that moment (left to their owner, or to this node once it trusts the
// lease again).
var ErrLeaseNotTrusted = errors.New("a lease not trusted at the moment")

// notRecorded says which receipts found are not known to be on record after RecordReceipts
// answered err, and whether err is worth a warning: none without an error; those of signers
// whose lease was not trusted, when that is all (no warning: a lease handed over or renewed
// late); every one otherwise.
func notRecorded(err error) (unrecorded func(FoundReceipt) bool, warn bool) {
	var partial *notRecordedError
	switch {
	case err == nil:
		return func(FoundReceipt) bool { return false }, false
	case errors.As(err, &partial) && partial.err == nil:
		return func(f FoundReceipt) bool { return partial.unheld[f.TxID] }, false
	default:
		return func(FoundReceipt) bool { return true }, true
	}
}

// writeHeld writes each signer's group with the lease this node holds for that signer, and
// leaves the groups of signers whose lease it cannot trust now to their owner (unheld hears
// of each, when not nil). A fenced write drops the lease; written runs after each
// successful write. It returns the rows written and every failure.
func writeHeld[T any](ctx context.Context, leases *services.LeaseManager, groups map[string][]T,
	write func(context.Context, domain.Lease, []T) (int, error), written func(domain.Lease, int, []T), unheld func(signer string)) (int, error) {
	total := 0
	var errs []error
	for signer, group := range groups {
		lease, ok := leases.Current(signer)
		if !ok {
			if unheld != nil {
				unheld(signer)
			}
			continue
		}
		n, err := write(ctx, lease, group)
		if err != nil {
			errs = append(errs, leases.Fence(ctx, lease, err))
			continue
		}
		total += n
		written(lease, n, group)
	}
	return total, errors.Join(errs...)
}
