package reconcile

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// maxHoleFill bounds how many placeholders one pass creates for a signer.
const maxHoleFill = 64

// NonceHole is a run of nonces below a signer's lowest open managed nonce that the chain
// neither mined nor holds pending: everything above waits for them.
type NonceHole struct {
	From, To uint64 // [From, To)
}

// findHole is the rule: with the chain's pending nonce below the lowest open managed nonce,
// the nonces in between are held by nothing (no managed row below an open one is unfinished,
// and the node's pending count would cover a transaction sent elsewhere). lowestOpen < 0:
// nothing is waiting, so no hole matters.
func findHole(pending uint64, lowestOpen int64) (NonceHole, bool) {
	if lowestOpen < 0 || pending >= uint64(lowestOpen) {
		return NonceHole{}, false
	}
	to := uint64(lowestOpen)
	return NonceHole{From: pending, To: min(to, pending+maxHoleFill)}, true
}

// holeTracker remembers since when each signer's hole has been seen, so only a hole that
// lasts the grace period is filled.
type holeTracker struct {
	mu   sync.Mutex
	seen map[string]seenHole
}

type seenHole struct {
	hole  NonceHole
	since time.Time
}

// observe records the current hole (or its absence) and reports how long that same hole
// has been there.
func (t *holeTracker) observe(signer string, hole NonceHole, present bool, now time.Time) time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !present {
		delete(t.seen, signer)
		return 0
	}
	prev, ok := t.seen[signer]
	if !ok || prev.hole != hole {
		t.seen[signer] = seenHole{hole: hole, since: now}
		return 0
	}
	return now.Sub(prev.since)
}

// FillNonceHoles fills a nonce hole of the signer that lasted the grace period with
// placeholder transactions (zero-value self-transfers, rows of their own that the pipeline
// signs and sends like any other, marked in the feed). A hole is what a transaction sent
// outside the service and then dropped leaves when the chain term moved allocation past
// it; nothing a person needs to decide. It returns how many placeholders it created.
func (r *Reconciler) FillNonceHoles(ctx context.Context, lease domain.Lease) (int, error) {
	if !r.cfg.FillHoles {
		return 0, nil
	}
	lowest, err := r.store.LowestOpenNonce(ctx, lease.Signer)
	if err != nil || lowest < 0 {
		r.holes.observe(lease.Signer, NonceHole{}, false, r.clock.Now())
		return 0, err
	}
	signer := common.HexToAddress(lease.Signer)
	// The highest any endpoint reports: what fills a hole decides that nonces are free, and
	// a transaction sent elsewhere may wait in one node's pool only.
	pending, err := services.HighestPendingNonce(ctx, r.chain, signer)
	if err != nil {
		return 0, fmt.Errorf("pending nonce: %w", err)
	}
	hole, present := findHole(pending, lowest)
	if age := r.holes.observe(lease.Signer, hole, present, r.clock.Now()); !present || age < r.cfg.HoleGrace {
		return 0, nil
	}
	placeholders := make([]domain.ManagedTx, 0, hole.To-hole.From)
	gas := services.TransferGas(ctx, r.chain, signer, signer)
	for nonce := hole.From; nonce < hole.To; nonce++ {
		placeholders = append(placeholders, placeholderTx(signer, lease.Signer, nonce, gas, r.clock.Now()))
	}
	created, err := r.store.InsertPlaceholders(ctx, lease, placeholders)
	if err != nil {
		return 0, r.leases.Fence(ctx, lease, err)
	}
	r.holes.observe(lease.Signer, NonceHole{}, false, r.clock.Now())
	r.metrics.NonceHolesFilled(ctx, created)
	r.log.WithContext(ctx).Warnw("msg", "nonce hole filled with placeholder transactions", "signer", lease.Signer, "fencing_token", lease.Token,
		"from_nonce", hole.From, "to_nonce", hole.To-1, "created", created, "lowest_open_nonce", lowest, "chain_pending_nonce", pending)
	return created, nil
}

// placeholderTx is a zero-value transfer from the signer to itself at nonce.
func placeholderTx(signer common.Address, signerHex string, nonce, gas uint64, now time.Time) domain.ManagedTx {
	tx := domain.ManagedTx{
		ID: uuid.Must(uuid.NewV7()), Signer: signer, SignerHex: signerHex, Nonce: nonce,
		Intent:            domain.Intent{To: &signer, ToHex: signerHex, Value: new(big.Int), GasLimit: gas},
		EffectiveGasLimit: gas, State: domain.StateAllocated, CreatedAt: now, UpdatedAt: now,
	}
	tx.Fingerprint = domain.CreateRequest{Signer: signer, Intent: tx.Intent}.Fingerprint()
	return tx
}
