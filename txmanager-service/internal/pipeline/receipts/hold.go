package receipts

import (
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Receipts found close to finality are held in memory and written together with the final
// state, in the one fenced finality statement: a transfer then costs one row version for
// "mined and final" instead of two (the receipt, then the final state a block or two
// later).
//
// Why holding is safe:
//   - Nothing durable depends on a held receipt. It is a fact of the chain, not a decision:
//     a receipt lost with a crash or a lost lease leaves the row broadcast and unmined in the
//     database, and whichever node owns the signer next looks it up again (the receipt
//     checker lists every broadcast, unmined row).
//   - Finality judges a held receipt against the same one view of the chain as a written one;
//     a held receipt whose block left the canonical chain is dropped, and its transaction
//     is looked up again, as a written one would be reverted.
//   - The final write checks that the row has no receipt on record and is still broadcast,
//     under the signer's lease (fenced like every finality write).
//
// Holding is bounded: only a receipt at most holdWithinBlocks blocks short of finality is
// held (with many confirmations required, or the node's finalized tag deciding, it is
// written at once as before), and one held longer than maxHold (a chain that stopped
// producing blocks) is written as a plain receipt. Meanwhile the row shows TRACKING without
// a receipt: the API shows MINED only for receipts written early.
const (
	holdWithinBlocks = 3
	maxHold          = 30 * time.Second
)

// heldReceipts are the receipts found and not written, by transaction.
type heldReceipts struct {
	mu sync.Mutex
	m  map[uuid.UUID]heldReceipt
}

type heldReceipt struct {
	found FoundReceipt
	since time.Time
}

// holdable says whether a receipt found at head is close enough to finality to be held. A
// receipt in a block above the head read (a block sealed between reading the head and the
// look-up, or an endpoint ahead of the one asked for the head) has at least its own block:
// finality judges it against a fresh view either way.
func holdable(cfg Config, r FoundReceipt, head uint64) bool {
	if cfg.UseFinalizedTag {
		return false
	}
	head = max(head, r.Receipt.BlockNumber)
	depth := head - r.Receipt.BlockNumber + 1
	needed := max(cfg.Confirmations, 1)
	return depth >= needed || needed-depth <= holdWithinBlocks
}

// hold keeps found until it is written with its final state (or dropped).
func (h *heldReceipts) hold(found FoundReceipt, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[uuid.UUID]heldReceipt{}
	}
	if _, ok := h.m[found.TxID]; !ok {
		h.m[found.TxID] = heldReceipt{found: found, since: now}
	}
}

// ids are the transactions whose receipts are held now.
func (h *heldReceipts) ids() map[uuid.UUID]struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[uuid.UUID]struct{}, len(h.m))
	for id := range h.m {
		out[id] = struct{}{}
	}
	return out
}

// minedFor is the held receipts of signers as mined transactions; those of other signers
// (a lease this node no longer holds) are dropped: their next owner looks them up again.
func (h *heldReceipts) minedFor(signers []string) []MinedTx {
	held := make(map[string]bool, len(signers))
	for _, s := range signers {
		held[s] = true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]MinedTx, 0, len(h.m))
	for id, r := range h.m {
		if !held[r.found.Signer] {
			delete(h.m, id)
			continue
		}
		out = append(out, r.found.mined())
	}
	return out
}

// expired takes out and returns the receipts held since before cutoff.
func (h *heldReceipts) expired(cutoff time.Time) []FoundReceipt {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []FoundReceipt
	for id, held := range h.m {
		if held.since.Before(cutoff) {
			out = append(out, held.found)
			delete(h.m, id)
		}
	}
	return out
}

// any says whether a receipt is held.
func (h *heldReceipts) any() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.m) > 0
}

// release forgets the held receipt of id (written, or to be looked up again).
func (h *heldReceipts) release(id uuid.UUID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

// mined is a held receipt as finality sees it.
func (f FoundReceipt) mined() MinedTx {
	held := f
	return MinedTx{TxID: f.TxID, Signer: f.Signer, Nonce: f.Nonce, BlockNumber: f.Receipt.BlockNumber, BlockHash: f.Receipt.BlockHash,
		Status: f.Receipt.Status, Kind: f.Kind, Held: &held,
		Cost: domain.ReceiptSummary{GasUsed: f.Receipt.GasUsed, EffectiveGasPrice: f.Receipt.EffectiveGasPrice, L1Fee: f.Receipt.L1Fee}}
}
