package receipts

import (
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
)

// defaultLostAboveHeadAfter is how long a receipt's block may stay above the chain's head
// before the receipt is taken as gone with the blocks the chain no longer has (Config.
// LostAboveHeadAfter). An endpoint behind a load balancer that lags the one that gave the
// receipt catches up within blocks; a chain that got shorter (a dev node restarted from
// older state, a rollback, a reorg to a shorter branch that then waits for transactions)
// may not make that height again until the signer's transactions are sent again, and they
// are not sent while the one below is taken as mined.
const defaultLostAboveHeadAfter = 2 * maxHold

// aboveHead remembers since when each receipt's block has been above the head.
type aboveHead struct {
	mu    sync.Mutex
	since map[aboveHeadKey]aboveHeadEntry
}

type aboveHeadKey struct {
	txID  uuid.UUID
	block common.Hash
}

type aboveHeadEntry struct {
	signer string
	since  time.Time
}

// lost returns, by signer, the transactions of mined (those of signers) whose block has been
// above head for at least after, and forgets the others of those signers. A block the pass
// read a header for (read) is not above the head whatever the head said: the head and the
// finalized block can come from backends at different heights. Entries twice as old as after
// belong to signers no pass has passed since (a lease that went elsewhere) and are dropped.
func (a *aboveHead) lost(mined []MinedTx, head uint64, read func(uint64) bool, signers []string, after time.Duration, now time.Time) map[string][]MinedTx {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.since) == 0 && !slices.ContainsFunc(mined, func(tx MinedTx) bool { return tx.BlockNumber > head && !read(tx.BlockNumber) }) {
		return nil // the common pass: nothing above the head, nothing remembered
	}
	if a.since == nil {
		a.since = map[aboveHeadKey]aboveHeadEntry{}
	}
	seen := make(map[aboveHeadKey]bool)
	out := map[string][]MinedTx{}
	for _, tx := range mined {
		if tx.BlockNumber <= head || read(tx.BlockNumber) {
			continue
		}
		key := aboveHeadKey{tx.TxID, tx.BlockHash}
		seen[key] = true
		entry, ok := a.since[key]
		if !ok {
			a.since[key] = aboveHeadEntry{signer: tx.Signer, since: now}
			continue
		}
		if now.Sub(entry.since) >= after {
			out[tx.Signer] = append(out[tx.Signer], tx)
			delete(a.since, key)
		}
	}
	passed := make(map[string]bool, len(signers))
	for _, s := range signers {
		passed[s] = true
	}
	for key, entry := range a.since {
		if passed[entry.signer] && !seen[key] || now.Sub(entry.since) >= 2*after {
			delete(a.since, key)
		}
	}
	return out
}
