package reconcile

import (
	"context"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// A node that keeps only recent state cannot say at which block a signer's nonce was used,
// but it keeps every block. A taken nonce mined before the window a pass reads first is then
// looked for in the chain's blocks, ScanBlocks a pass, going down from the head until every
// nonce looked for is found. Without it such a row would wait for an archive endpoint that
// may never come, and the signer's head of line with it.
//
// The scan's first step reads the window again: the head the window was read at may be
// another endpoint's, higher than the one the pass reads after it, and starting below a
// lower head's window would leave the blocks between unread.
//
// What the scan found is kept until its row is settled: on a chain whose finality trails the
// window (Arbitrum's finalized block is thousands of blocks behind its head) a transaction
// can be found before it is final, and the blocks above the scan's floor are not read again.

// belowWindowScan is one signer's scan.
type belowWindowScan struct {
	// token is the lease the scan runs under: a node that lost the signer and won it back
	// starts again, since another node may have settled and changed its rows meanwhile.
	token uint64
	// nonces are the taken nonces it looks for, in order.
	nonces []uint64
	// floor is the lowest block read: the next step reads the blocks below it.
	floor uint64
	found map[uint64]services.SentTx
	used  time.Time
}

// belowWindowScans are the scans under way, by signer.
type belowWindowScans struct {
	mu       sync.Mutex
	bySigner map[common.Address]*belowWindowScan
}

// idleScanLife: a scan no pass used for this long is dropped (its signer's lease went to
// another node, which scans for itself).
const idleScanLife = time.Hour

// scanFor is the signer's scan for nonces under the lease token: the one under way when it
// looks for every one of them (a settled row only leaves the set), otherwise a new one from
// the block below head, keeping what the old one found of nonces.
func (s *belowWindowScans) scanFor(signer common.Address, token uint64, nonces []uint64, head uint64, now time.Time) *belowWindowScan {
	s.mu.Lock()
	defer s.mu.Unlock()
	for other, scan := range s.bySigner {
		if now.Sub(scan.used) > idleScanLife {
			delete(s.bySigner, other)
		}
	}
	old, ok := s.bySigner[signer]
	if ok && old.token == token && containsAll(old.nonces, nonces) {
		old.used = now
		return old
	}
	scan := &belowWindowScan{token: token, nonces: slices.Sorted(slices.Values(nonces)), floor: head + 1, found: map[uint64]services.SentTx{}, used: now}
	if ok && old.token == token {
		for _, nonce := range nonces {
			if tx, found := old.found[nonce]; found {
				scan.found[nonce] = tx
			}
		}
	}
	s.bySigner[signer] = scan
	return scan
}

// forget ends the signer's scan: nothing is looked for any more.
func (s *belowWindowScans) forget(signer common.Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bySigner, signer)
}

// forgetFinding ends the signer's scan when it found hash at nonce: a block the chain no
// longer holds, so what holds the nonce now is looked for again from the head. A finding of
// the window's own (a reorganisation near the head) leaves the scan as it is.
func (s *belowWindowScans) forgetFinding(signer common.Address, nonce uint64, hash common.Hash) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if scan, ok := s.bySigner[signer]; ok && scan.found[nonce].Hash == hash {
		delete(s.bySigner, signer)
	}
}

func containsAll(set, items []uint64) bool {
	for _, item := range items {
		if _, ok := slices.BinarySearch(set, item); !ok {
			return false
		}
	}
	return true
}

// findBelowWindow adds to found the transactions at nonces (mined, and not in the window the
// pass read) that the signer's scan has found, reading one more step of it first. A signer's
// passes run one at a time, so a scan has one user.
func (r *Reconciler) findBelowWindow(ctx context.Context, signer common.Address, token uint64, nonces []uint64, found map[uint64]services.SentTx, head uint64) {
	scan := r.belowWindow.scanFor(signer, token, nonces, head, r.clock.Now())
	if unfound := unfoundOf(scan, nonces); len(unfound) > 0 {
		r.stepBelowWindow(ctx, signer, scan, unfound)
	}
	for _, nonce := range nonces {
		if tx, ok := scan.found[nonce]; ok {
			found[nonce] = tx
		}
	}
}

// unfoundOf is the nonces the scan has not found yet.
func unfoundOf(scan *belowWindowScan, nonces []uint64) []uint64 {
	var unfound []uint64
	for _, nonce := range nonces {
		if _, ok := scan.found[nonce]; !ok {
			unfound = append(unfound, nonce)
		}
	}
	return unfound
}

// stepBelowWindow reads the ScanBlocks blocks below the scan's floor and records the
// sender's transactions at the nonces it looks for. A transaction of the sender below the
// lowest nonce still unfound, or the first block, ends the scan without them: nonces only
// grow, so they are not on the chain the scan read (a reorganisation moved them, or they
// were never mined there); the next pass starts again from the head.
func (r *Reconciler) stepBelowWindow(ctx context.Context, signer common.Address, scan *belowWindowScan, unfound []uint64) {
	log := r.log.WithContext(ctx)
	if scan.floor == 0 {
		log.Warnw("msg", "taken nonces were not found in any block down to the first; looking again from the head",
			"signer", signer.Hex(), "nonces", unfound)
		r.belowWindow.forget(signer)
		return
	}
	step := min(max(r.cfg.ScanBlocks, 1), scan.floor)
	first := scan.floor - step
	read, err := r.chain.ScanSent(ctx, signer, first, step, 0, math.MaxInt)
	if err != nil {
		log.Warnw("msg", "reading blocks for taken nonces mined before the window failed; the next pass tries again",
			"signer", signer.Hex(), "from_block", first, "to_block", scan.floor-1, "error", err)
		return
	}
	if read.Next < scan.floor {
		log.Warnw("msg", "the node served blocks for taken nonces only up to a point; the next pass reads them again",
			"signer", signer.Hex(), "from_block", first, "to_block", scan.floor-1, "served_to", read.Next)
		return
	}
	for _, tx := range read.Txs {
		if _, wanted := slices.BinarySearch(scan.nonces, tx.Nonce); wanted {
			scan.found[tx.Nonce] = tx
		}
	}
	scan.floor = first
	if still := unfoundOf(scan, unfound); len(still) > 0 {
		lowest := slices.Min(still)
		if slices.ContainsFunc(read.Txs, func(tx services.SentTx) bool { return tx.Nonce < lowest }) {
			log.Warnw("msg", "taken nonces are not where the chain's transactions of the signer say they were mined; looking again from the head",
				"signer", signer.Hex(), "nonces", still, "read_down_to", first)
			r.belowWindow.forget(signer)
			return
		}
	}
	log.Infow("msg", "taken nonces mined before the window, on a node that keeps no old state: read blocks for them",
		"signer", signer.Hex(), "from_block", first, "to_block", first+step-1, "found", len(scan.found), "looked_for", len(scan.nonces))
}
