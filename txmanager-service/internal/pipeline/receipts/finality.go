package receipts

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AdvanceFinality moves mined transactions of the given signers on: a receipt whose block
// is no longer canonical goes back to TRACKING; one with enough confirmations (or under the
// node's finalized block) becomes CONFIRMED or FAILED_FINAL together with its completion.
// It returns how many went back to TRACKING.
//
// The pass judges every transaction against one view of the chain: the head is read once
// and each height's canonical block is fetched once, so two transactions in one block can
// never be judged against different forks. A depth counts only along headers that link to
// each other (chainView).
func (t *Tracker) AdvanceFinality(ctx context.Context, signers []string) (int, error) {
	ctx, span := t.metrics.Tracer.Start(ctx, "pipeline.finality")
	defer span.End()
	// Receipts held too long (a chain that stopped making blocks) are written as MINED.
	_, expiredErr := t.writeReceipts(ctx, t.held.expired(time.Now().Add(-maxHold)))
	var unheld *notRecordedError
	if errors.As(expiredErr, &unheld) {
		expiredErr = unheld.err // receipts of a lease not trusted now are left to its owner, as before
	}
	mined, err := t.store.ListMined(ctx, signers)
	if err != nil {
		return 0, errors.Join(expiredErr, err)
	}
	mined = append(mined, t.held.minedFor(signers)...)
	if len(mined) == 0 {
		return 0, expiredErr
	}
	view, err := t.chainView(ctx, mined)
	if err != nil {
		return 0, errors.Join(expiredErr, err)
	}
	if view.finalizedErr != nil {
		// Nothing is judged final this pass, but reorgs are still followed: a receipt whose
		// block was replaced must not wait for the tag to be served again.
		expiredErr = errors.Join(expiredErr, view.finalizedErr)
	}
	// The catch-up's failure holds back only the receipts it proves (catch_up.go).
	expiredErr = errors.Join(expiredErr, view.catchUpErr)
	reorged, finals := judge(mined, view, t.cfg)
	after := t.cfg.LostAboveHeadAfter
	if after <= 0 {
		after = defaultLostAboveHeadAfter
	}
	read := func(height uint64) bool { _, ok := view.canonical[height]; return ok }
	for signer, txs := range t.above.lost(mined, view.head, read, signers, after, time.Now()) {
		// A chain that got shorter than the receipt's block for so long: the receipt is
		// taken as gone with that block. Were it still there, the next look-up finds it
		// again, and sending it again is answered "already known" or "nonce too low".
		t.log.WithContext(ctx).Warnw("msg", "receipts above the chain's head for too long; tracking again", "signer", signer, "count", len(txs),
			"first_tx_id", txs[0].TxID.String(), "first_block", txs[0].BlockNumber, "head", view.head, "after", after.String())
		reorged[signer] = append(reorged[signer], txs...)
	}
	// A held receipt whose block left the chain has nothing on record to revert: forgetting
	// it is enough, and its transaction, still unmined in the database, is looked up again.
	droppedHeld := 0
	for signer, txs := range reorged {
		kept := slices.DeleteFunc(txs, func(tx MinedTx) bool {
			if tx.Held != nil {
				t.held.release(tx.TxID)
				droppedHeld++
				return true
			}
			return false
		})
		if len(kept) == 0 {
			delete(reorged, signer)
		} else {
			reorged[signer] = kept
		}
	}

	reverted, revertErr := writeHeld(ctx, t.leases, reorged, t.store.RevertReorged, func(lease domain.Lease, n int, txs []MinedTx) {
		for range n {
			t.metrics.Reorg(ctx)
		}
		t.log.WithContext(ctx).Warnw("msg", "receipts left the canonical chain; tracking again", "signer", lease.Signer, "fencing_token", lease.Token,
			"count", n, "first_tx_id", txs[0].TxID.String(), "state", string(domain.StateTracking), "sub_state", "REORGED")
	}, nil)
	_, finalizeErr := writeHeld(ctx, t.leases, finals, t.store.Finalize, func(lease domain.Lease, n int, group []Finalization) {
		for _, f := range group {
			t.held.release(f.Tx.TxID)
			if n > 0 && f.Tx.Cost.EffectiveGasPrice != nil {
				l2 := new(big.Int).Mul(new(big.Int).SetUint64(f.Tx.Cost.GasUsed), f.Tx.Cost.EffectiveGasPrice)
				t.metrics.SignerSpent(ctx, lease.Signer, l2, f.Tx.Cost.L1Fee)
			}
		}
		t.log.WithContext(ctx).Infow("msg", "transactions final", "signer", lease.Signer, "fencing_token", lease.Token, "count", n,
			"first_tx_id", group[0].Tx.TxID.String(), "first_state", string(group[0].State))
	}, nil)
	for range droppedHeld {
		t.metrics.Reorg(ctx)
	}
	return reverted + droppedHeld, errors.Join(expiredErr, revertErr, finalizeErr)
}

// chainView is one pass's view of the chain: the head, the finalized block (when the
// finalized tag decides), and the canonical headers a decision needs: each mined tx's block
// and the blocks above it up to where its finality is proven.
//
// A depth is only counted along headers that link to each other (each one's parent hash is
// the hash of the one below), never by subtracting a mined height from a head read in
// another call. Behind several endpoints, or one load balancer over backends at different
// heights, the head and the headers can come from nodes on different forks: a backend that
// still holds a block another has reorged out would otherwise have that block judged
// against the other's head, and a depth it does not have there.
type chainView struct {
	head          uint64
	finalizedAt   uint64
	finalizedHash common.Hash
	// finalizedErr: the finalized block could not be read; finalizedAt is 0, so nothing is
	// final, and each mined block is still compared with the canonical one.
	finalizedErr error
	// catchUpErr: the catch-up on deep receipts' headers could not read all it meant to.
	catchUpErr error
	canonical  map[uint64]services.BlockHeader
	// linkedTo is, for each height in canonical, the highest height reached from it along
	// headers that link to each other.
	linkedTo map[uint64]uint64
}

func (t *Tracker) chainView(ctx context.Context, mined []MinedTx) (chainView, error) {
	head, err := t.chain.LatestHeader(ctx)
	if err != nil {
		return chainView{}, fmt.Errorf("head: %w", err)
	}
	view := chainView{head: head.Number}
	if t.cfg.UseFinalizedTag {
		finalized, err := t.chain.FinalizedHeader(ctx)
		if err != nil {
			view.finalizedErr = fmt.Errorf("finalized block: %w", err)
		} else {
			view.finalizedAt, view.finalizedHash = finalized.Number, finalized.Hash
		}
	}
	beyond, perPass := t.cfg.CatchUpBeyond, t.cfg.CatchUpPerPass
	if beyond == 0 {
		beyond = defaultCatchUpBeyond
	}
	if perPass <= 0 {
		perPass = defaultCatchUpPerPass
	}
	var blocks, deep []uint64
	for _, tx := range mined {
		switch {
		case tx.BlockNumber > head.Number:
		case t.cfg.UseFinalizedTag && view.finalizedErr == nil && view.finalizedAt > tx.BlockNumber+beyond:
			deep = append(deep, tx.BlockNumber)
		default:
			blocks = append(blocks, tx.BlockNumber)
		}
	}
	var segment catchUpSegment
	if t.cfg.UseFinalizedTag && view.finalizedErr == nil {
		slices.Sort(deep)
		segment, view.catchUpErr = t.catchUp.advance(ctx, t.chain.HeadersByNumber, slices.Compact(deep), view.finalizedAt-min(beyond, view.finalizedAt), perPass)
		if segment.valid && segment.top < view.finalizedAt && segment.top+beyond >= view.finalizedAt {
			// Within reach of the finalized block: this pass reads the rest of the way, from
			// the header above the catch-up's top.
			blocks = append(blocks, segment.top+1)
		}
	}
	slices.Sort(blocks)
	var heights []uint64 // ascending, each once
	for _, block := range slices.Compact(blocks) {
		from := block
		if n := len(heights); n > 0 && heights[n-1] >= from {
			from = heights[n-1] + 1
		}
		for h := from; h <= view.proofTop(block, t.cfg); h++ {
			heights = append(heights, h)
		}
	}
	// In calls of a bounded size, each with the chain's read deadline: after finality has not
	// run for a while, the headers up to the finalized block are many, and one call for all
	// of them would run out of its deadline at every pass, for good.
	view.canonical = make(map[uint64]services.BlockHeader, len(heights))
	for chunk := range slices.Chunk(heights, headersPerCall) {
		headers, err := t.chain.HeadersByNumber(ctx, chunk)
		if err != nil {
			return chainView{}, fmt.Errorf("canonical headers: %w", err)
		}
		for i, h := range headers {
			if h != nil {
				view.canonical[chunk[i]] = *h
			}
		}
	}
	if !view.addCatchUp(segment) {
		t.catchUp.drop(segment)
	}
	return view, nil
}

// addCatchUp puts what the catch-up proved in the view and links it: each deep receipt's
// block reaches as far as the catch-up's top does, when the top links into the headers this
// pass read up to the finalized block. It reports false when this pass's headers show the
// catch-up does not hold (another block at its top, or the one above not linking to it).
func (v *chainView) addCatchUp(segment catchUpSegment) bool {
	if !segment.valid {
		v.link()
		return true
	}
	holds := true
	if read, ok := v.canonical[segment.top]; ok && read.Hash != segment.topHash {
		holds = false
	}
	if above, ok := v.canonical[segment.top+1]; ok && above.ParentHash != segment.topHash {
		holds = false
	}
	if holds {
		for h, hash := range segment.at {
			if _, read := v.canonical[h]; !read {
				v.canonical[h] = services.BlockHeader{Number: h, Hash: hash}
			}
		}
		if _, read := v.canonical[segment.top]; !read {
			v.canonical[segment.top] = services.BlockHeader{Number: segment.top, Hash: segment.topHash}
		}
	}
	v.link()
	// Only a top below the finalized block can link up to it (the finalized block read
	// this pass may be lower than the one the catch-up was reaching for, from a lagging
	// backend: then the headers above the top up to it were not read, nothing is proven).
	if !holds || segment.top >= v.finalizedAt {
		return holds
	}
	for h, hash := range segment.at {
		if v.canonical[h].Hash == hash {
			v.linkedTo[h] = max(v.linkedTo[h], v.linkedTo[segment.top])
		}
	}
	return true
}

// headersPerCall bounds one call for canonical headers (a few batches of requests).
const headersPerCall = 500

// proofTop is the highest height whose header a decision on a block at height needs: the
// block that gives it the confirmations required (no higher than the head), or the
// finalized block when the tag decides and has reached it.
func (v chainView) proofTop(height uint64, cfg Config) uint64 {
	if cfg.UseFinalizedTag {
		if height <= v.finalizedAt {
			return v.finalizedAt
		}
		return height
	}
	return min(height+max(cfg.Confirmations, 1)-1, v.head)
}

// link fills linkedTo from canonical, from the top down.
func (v *chainView) link() {
	v.linkedTo = make(map[uint64]uint64, len(v.canonical))
	heights := slices.Sorted(maps.Keys(v.canonical))
	for i := len(heights) - 1; i >= 0; i-- {
		h := heights[i]
		v.linkedTo[h] = h
		if above, ok := v.canonical[h+1]; ok && above.ParentHash == v.canonical[h].Hash {
			v.linkedTo[h] = v.linkedTo[h+1]
		}
	}
}

// judge sorts mined transactions by signer into those whose block left the canonical
// chain and those that are final in view; the rest wait for a later pass.
func judge(mined []MinedTx, view chainView, cfg Config) (reorged map[string][]MinedTx, finals map[string][]Finalization) {
	reorged, finals = map[string][]MinedTx{}, map[string][]Finalization{}
	for _, tx := range mined {
		block, ok := view.canonical[tx.BlockNumber]
		switch {
		case !ok:
			// Above the head this view reached, or a header the endpoint did not serve: an
			// endpoint lagging behind the one that gave the receipt (a load balancer over
			// backends at different heights) is not a reorg. Judged on a later pass.
			continue
		case block.Hash != tx.BlockHash:
			// A header is only served by an endpoint that has that height, so a different
			// hash there is the chain having moved on without this block.
			reorged[tx.Signer] = append(reorged[tx.Signer], tx)
			continue
		}
		// Proven: the blocks from the receipt's up to here are one chain.
		provenTo := view.linkedTo[tx.BlockNumber]
		isFinal := provenTo-tx.BlockNumber+1 >= max(cfg.Confirmations, 1)
		if cfg.UseFinalizedTag {
			finalized, ok := view.canonical[view.finalizedAt]
			isFinal = tx.BlockNumber <= view.finalizedAt && provenTo >= view.finalizedAt && ok && finalized.Hash == view.finalizedHash
		}
		if isFinal {
			finals[tx.Signer] = append(finals[tx.Signer], finalization(tx))
		}
	}
	return reorged, finals
}

// finalization decides the final state from the receipt status and which attempt was mined.
func finalization(tx MinedTx) Finalization {
	switch {
	case !tx.Kind.ExecutesIntent():
		return Finalization{Tx: tx, State: domain.StateFailedFinal, SubState: domain.SubStateCancelled}
	case tx.Status == 1:
		return Finalization{Tx: tx, State: domain.StateConfirmed}
	default:
		return Finalization{Tx: tx, State: domain.StateFailedFinal, SubState: domain.SubStateReverted}
	}
}
