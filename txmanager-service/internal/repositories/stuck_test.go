package repositories_test

import (
	"errors"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// insertAttempt writes an attempt of r (its row txID) at hash, with its fees.
func insertAttempt(t *testing.T, pool *pgxpool.Pool, r txRow, txID uuid.UUID, hash, kind string, maxFee, tip int64) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
		VALUES (1337, $1, $2, $3, $4, $5, $6, $7, 30000, '\x00', 1)`, hash, txID, r.signer, r.nonce, kind, maxFee, tip); err != nil {
		t.Fatal(err)
	}
}

// The stuck stage reads a signer's head of line (its lowest unmined nonce, what every later
// one waits for) or one transaction by id, with its current attempt's fees; and claims a
// resolution in one fenced statement, audited, once per change, its waiting time counted
// from the claim.
func TestStuckRepository(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	store := repositories.NewStuckRepository(pool, testChain())
	signer := testsupport.SignerAddress(260).Hex()
	lease := acquireLease(t, pool, signer, "node-a")
	insertTx(t, pool, txRow{signer: signer, nonce: 0, state: "CONFIRMED", confirmed: true})
	head := txRow{signer: signer, nonce: 1, state: "TRACKING", subState: "SIGNED", hash: "0x" + strings.Repeat("1", 64), age: time.Hour}
	headID := insertTx(t, pool, head)
	insertAttempt(t, pool, head, headID, head.hash, "ORIGINAL", 100, 2)
	unsent := insertTx(t, pool, txRow{signer: signer, nonce: 2, state: "TRACKING", age: time.Minute})
	allocated := insertTx(t, pool, txRow{signer: signer, nonce: 3, state: "ALLOCATED"})

	h, err := store.HeadOfLine(t.Context(), signer)
	if err != nil || h == nil {
		t.Fatalf("head of line: %+v (%v)", h, err)
	}
	if h.TxID != headID || h.Nonce != 1 || h.TxHash == nil || h.TxHash.Hex() != head.hash || h.MaxFee.Int64() != 100 || h.MaxTip.Int64() != 2 ||
		h.GasLimit != 30000 || h.PendingDepth != 3 || !h.Since.Equal(h.CreatedAt) || h.Intent.Value.Int64() != 2 {
		t.Fatalf("head of line %+v, want nonce 1 with its attempt's fees and gas, 3 pending, waiting since creation", h)
	}
	tests := []struct {
		name string
		id   uuid.UUID
		want *uuid.UUID
	}{
		{"an unmined transaction without an attempt", unsent, &unsent},
		{"one never signed, named by its id (an operator cancels what its key refuses)", allocated, &allocated},
		{"one nobody wrote", uuid.New(), nil},
	}
	for _, tc := range tests {
		got, err := store.Resolvable(t.Context(), tc.id)
		switch {
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want == nil && got != nil:
			t.Errorf("%s: %+v, want none", tc.name, got)
		case tc.want != nil && (got == nil || got.TxID != *tc.want || got.TxHash != nil || got.MaxFee != nil || got.GasLimit != 21000):
			t.Errorf("%s: %+v, want it with its own gas limit and no fees yet", tc.name, got)
		}
	}
	if none, err := store.HeadOfLine(t.Context(), testsupport.SignerAddress(261).Hex()); err != nil || none != nil {
		t.Fatalf("a signer with nothing unmined: %+v (%v)", none, err)
	}

	claim := stuck.Claim{TxID: headID, Action: domain.ActionNoop, NewState: domain.StateStuck, Reason: "no receipt for an hour"}
	stale := lease
	stale.Token++
	if _, err := store.ClaimResolution(t.Context(), stale, claim); !errors.Is(err, domain.ErrFenced) {
		t.Fatalf("a claim under a lease no longer held: %v, want FENCED", err)
	}
	for i, want := range []bool{true, false} {
		claimed, err := store.ClaimResolution(t.Context(), lease, claim)
		if err != nil || claimed != want {
			t.Fatalf("claim %d: %t (%v), want %t (a claim that changes nothing is not made twice)", i, claimed, err, want)
		}
	}
	var audits int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM stuck_resolution_audit WHERE tx_id = $1 AND action = 'NOOP'", headID).Scan(&audits); err != nil || audits != 1 {
		t.Fatalf("audit rows %d (%v), want 1", audits, err)
	}
	h, err = store.HeadOfLine(t.Context(), signer)
	if err != nil || h == nil || h.State != domain.StateStuck || h.LastError != claim.Reason || !h.Since.After(h.CreatedAt) {
		t.Fatalf("after the claim: %+v (%v), want STUCK with the reason, waiting since the claim", h, err)
	}
}

// The stage's own claim of a resolution holds only over the attempt it priced against: a
// re-pricing stored since the head was read is neither claimed over nor audited. An
// operator's claim (no check) is taken as asked.
func TestAStuckClaimHoldsOnlyOverTheAttemptItPricedAgainst(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000b9"
	lease := acquireLease(t, pool, signer, "node-a")
	current, stale := common.BigToHash(big.NewInt(701)), common.BigToHash(big.NewInt(700))
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, tx_hash, fencing_token)
		VALUES (1337, $1, $2, '\x00', 0, '{"value":"1"}', 'TRACKING', $3, $4)`, id, signer, current.Hex(), int64(lease.Token)); err != nil {
		t.Fatal(err)
	}
	repo := repositories.NewStuckRepository(pool, testChain())
	audits := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM stuck_resolution_audit WHERE tx_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, tc := range []struct {
		name   string
		claim  stuck.Claim
		want   bool
		audits int
	}{
		{"the stage's, priced against an attempt re-priced since", stuck.Claim{SubState: "RESOLVING_CANCEL", PricedAgainst: &stale, CheckCurrent: true}, false, 0},
		{"the stage's, priced against no attempt where one is signed", stuck.Claim{SubState: "RESOLVING_CANCEL", CheckCurrent: true}, false, 0},
		{"the stage's, priced against the current attempt", stuck.Claim{SubState: "RESOLVING_CANCEL", PricedAgainst: &current, CheckCurrent: true}, true, 1},
		{"an operator's, without the check", stuck.Claim{SubState: "RESOLVING_REPLACE", PricedAgainst: &stale}, true, 2},
	} {
		claim := tc.claim
		claim.TxID, claim.NewState, claim.Reason = id, "TRACKING", tc.name
		claim.Action = domain.ResolutionAction(strings.TrimPrefix(string(claim.SubState), "RESOLVING_"))
		claimed, err := repo.ClaimResolution(ctx, lease, claim)
		if err != nil || claimed != tc.want || audits() != tc.audits {
			t.Errorf("%s: claimed %v (%v), %d audit rows; want %v, %d", tc.name, claimed, err, audits(), tc.want, tc.audits)
		}
	}
}
