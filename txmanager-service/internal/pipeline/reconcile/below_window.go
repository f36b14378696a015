package reconcile

import (
	"context"
	"math"
	"slices"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// A node that keeps only recent state cannot say at which block a signer's nonce was used,
// but it keeps every block. A taken nonce mined before the window a pass reads first is then
// looked for in the blocks below that window, ScanBlocks more a pass, going down from
// where the last pass stopped, until every nonce looked for is found or the first block is
// read. Without it such a row would wait for an archive endpoint that may never come, and
// the signer's head of line with it.
//
// What the scan found is kept until its row is settled: on a chain whose finality trails the
// window (Arbitrum's finalized block is thousands of blocks behind its head) a transaction
// can be found before it is final, and the blocks above the scan's floor are not read again.

// belowWindowScan is one signer's scan below the window.
type belowWindowScan struct {
	// nonces are the taken nonces it looks for, in order.
	nonces []uint64
	// floor is the lowest block read: the next step reads the blocks below it.
	floor uint64
	found map[uint64]services.SentTx
}

// belowWindowScans are the scans under way, by signer. A node that loses a signer's lease
// keeps its scan until the signer has no taken nonces it looks for; one that gains the lease
// starts again at the window.
type belowWindowScans struct {
	mu       sync.Mutex
	bySigner map[common.Address]*belowWindowScan
}

// scanFor is the signer's scan for nonces, started at floor unless one under way already
// looks for every one of them (a settled row only leaves the set).
func (s *belowWindowScans) scanFor(signer common.Address, nonces []uint64, floor uint64) *belowWindowScan {
	s.mu.Lock()
	defer s.mu.Unlock()
	if scan, ok := s.bySigner[signer]; ok && containsAll(scan.nonces, nonces) {
		return scan
	}
	scan := &belowWindowScan{nonces: slices.Sorted(slices.Values(nonces)), floor: floor, found: map[uint64]services.SentTx{}}
	s.bySigner[signer] = scan
	return scan
}

// forget ends the signer's scan: nothing is looked for, or what it found is no longer the
// chain's.
func (s *belowWindowScans) forget(signer common.Address) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bySigner, signer)
}

func containsAll(set, items []uint64) bool {
	for _, item := range items {
		if _, ok := slices.BinarySearch(set, item); !ok {
			return false
		}
	}
	return true
}

// findBelowWindow adds to found the transactions at nonces (mined, not in the window that
// ended at head) that the signer's scan below the window has found, reading one more step
// of it first.
func (r *Reconciler) findBelowWindow(ctx context.Context, signer common.Address, nonces []uint64, found map[uint64]services.SentTx, head uint64) {
	windowFloor := head + 1 - min(head+1, r.cfg.ScanBlocks)
	scan := r.belowWindow.scanFor(signer, nonces, windowFloor)
	if len(scan.found) < len(scan.nonces) && scan.floor > 0 {
		step := min(max(r.cfg.ScanBlocks, 1), scan.floor)
		first := scan.floor - step
		read, err := r.chain.ScanSent(ctx, signer, first, step, scan.nonces[0], math.MaxInt)
		switch {
		case err != nil:
			r.log.WithContext(ctx).Warnw("msg", "reading the blocks below the window for taken nonces failed; the next pass tries again",
				"signer", signer.Hex(), "from_block", first, "to_block", scan.floor-1, "error", err)
		case read.Next < scan.floor:
			// The endpoint stopped short (behind the head it reported): this step again later.
		default:
			for _, tx := range read.Txs {
				if _, wanted := slices.BinarySearch(scan.nonces, tx.Nonce); wanted {
					scan.found[tx.Nonce] = tx
				}
			}
			scan.floor = first
			r.log.WithContext(ctx).Infow("msg", "taken nonces mined before the window, on a node that keeps no old state: read blocks below the window",
				"signer", signer.Hex(), "from_block", first, "to_block", first+step-1, "found", len(scan.found), "looked_for", len(scan.nonces))
		}
	}
	for _, nonce := range nonces {
		if tx, ok := scan.found[nonce]; ok {
			found[nonce] = tx
		}
	}
}
