package stuck_test

import (
	"context"
	"errors"
	"math/big"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// The detector asks the hook only about a head of line that has waited MinAge and been
// broadcast MinAttempts times; with the default policy (NOOP) the transaction is marked
// STUCK and audited, and a head already STUCK is left alone
// (docs/design.md#stuck-detection-and-resolution).
func TestDetectStuckOnlyPastTheThresholds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  stuck.Config
		// idle: nothing was ever sent, so there is no head of line.
		idle      bool
		wantStuck bool
	}{
		{name: "past both thresholds", cfg: stuck.Config{MinAttempts: 1}, wantStuck: true},
		{name: "too young", cfg: stuck.Config{MinAge: time.Hour, MinAttempts: 1}},
		{name: "broadcast too few times", cfg: stuck.Config{MinAttempts: 2}},
		{name: "no head of line", idle: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			hook := &askedHook{Hook: stuck.PolicyHook{}}
			r := s.resolver(tc.cfg, hook)
			var before txRow
			if !tc.idle {
				before = s.sendOne()
			}

			found, err := r.DetectStuck(ctx(t), s.lease)
			if err != nil || found != tc.wantStuck {
				t.Fatalf("DetectStuck = %v, %v; want %v", found, err, tc.wantStuck)
			}
			if asked := hook.asked.Load() != nil; asked != tc.wantStuck {
				t.Fatalf("hook asked: %v, want %v", asked, tc.wantStuck)
			}
			if tc.idle {
				return
			}
			row, audits := s.row(), s.audits(before.id)
			if !tc.wantStuck {
				if row.state != string(domain.StateTracking) || len(audits) != 0 {
					t.Fatalf("row %+v with audits %+v, want it left TRACKING and unaudited", row, audits)
				}
				return
			}
			if row.state != string(domain.StateStuck) || row.subState != string(domain.ActionNoop) || row.hash != before.hash {
				t.Fatalf("row %+v, want STUCK/NOOP on its own attempt %s", row, before.hash.Hex())
			}
			if len(audits) != 1 || audits[0].action != string(domain.ActionNoop) || audits[0].node != "node-a" || audits[0].token != s.lease.Token ||
				!strings.Contains(audits[0].reason, "policy NOOP") {
				t.Fatalf("audits %+v, want one NOOP by node-a under token %d with the policy's reason", audits, s.lease.Token)
			}
			// Marked STUCK, it waits for a receipt or a person: the detector does not ask again.
			if again, err := r.DetectStuck(ctx(t), s.lease); err != nil || again || len(s.audits(before.id)) != 1 {
				t.Fatalf("second DetectStuck = %v, %v with %d audits; want the STUCK head left alone", again, err, len(s.audits(before.id)))
			}
		})
	}
}

// Each action an operator (or a hook) picks is claimed and audited before anything is
// signed or sent; CANCEL and PLACEHOLDER put a 0-value self-transfer at the nonce, REPLACE
// the same intent with bumped fees, NOOP only marks it STUCK; when the fee caps leave no
// room for a replacement the claim falls back to NOOP. What the chain then mines at the
// nonce is the action's transaction.
//
// The action's attempt is stored as <ACTION>_SUBMITTED and then sent like any
// resubmission, whose accepted outcome is written over it: the row reads SUBMITTED, and
// the current attempt's kind names the action.
func TestResolveTxCarriesOutEachAction(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		action domain.ResolutionAction
		// capped: the fee cap is the stuck attempt's own fee, so no replacement fits.
		capped       bool
		wantState    domain.State
		wantSubState string
		// wantKind of the current attempt ("" keeps the stuck one); wantValue is what the
		// transaction mined at the nonce sends the signer (the intent's 1 wei, or 0).
		wantKind   string
		wantValue  int64
		wantReason string
		wantErr    error
	}{
		{name: "NOOP marks it STUCK", action: domain.ActionNoop, wantState: domain.StateStuck, wantSubState: "NOOP", wantValue: 1, wantReason: "ops"},
		{name: "CANCEL sends a 0-value self-transfer", action: domain.ActionCancel, wantState: domain.StateTracking, wantSubState: string(domain.SubStateSubmitted),
			wantKind: "CANCEL", wantReason: "ops"},
		{name: "REPLACE sends the intent again at bumped fees", action: domain.ActionReplace, wantState: domain.StateTracking, wantSubState: string(domain.SubStateSubmitted),
			wantKind: "REPLACE", wantValue: 1, wantReason: "ops"},
		{name: "PLACEHOLDER fills the nonce with a 0-value self-transfer", action: domain.ActionPlaceholder, wantState: domain.StateTracking,
			wantSubState: string(domain.SubStateSubmitted), wantKind: "PLACEHOLDER", wantReason: "ops"},
		// An operator's request no fee within the caps can carry out is answered with the
		// reason: marking it STUCK would answer the request as if it had been done.
		{name: "no fee within the caps: the operator is told, nothing changes", action: domain.ActionCancel, capped: true, wantErr: domain.ErrInvalidArgument},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			before := s.sendOne()
			var cfg stuck.Config
			if tc.capped {
				head, err := s.store.Resolvable(ctx(t), before.id)
				if err != nil || head == nil || head.MaxFee == nil {
					t.Fatalf("resolvable: %+v, %v", head, err)
				}
				cfg.Fees.MaxFeeCap = head.MaxFee
			}
			r := s.resolver(cfg, stuck.PolicyHook{})
			var recorded atomic.Int32
			r.OnAttemptRecorded(func() { recorded.Add(1) })

			got, err := r.ResolveTx(ctx(t), before.id, tc.action, "ops")
			if tc.wantErr != nil {
				row := s.row()
				if !errors.Is(err, tc.wantErr) || !strings.Contains(err.Error(), services.ErrFeeCapReached.Error()) || row.state != string(domain.StateTracking) ||
					row.hash != before.hash || len(s.audits(before.id)) != 0 {
					t.Fatalf("ResolveTx = %q, %v with row %+v; want %v naming the caps, the row and its audit trail unchanged", got, err, row, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.action {
				t.Fatalf("ResolveTx = %q, %v; want %q", got, err, tc.action)
			}
			row := s.row()
			if row.state != string(tc.wantState) || row.subState != tc.wantSubState {
				t.Fatalf("row %s/%s, want %s/%s", row.state, row.subState, tc.wantState, tc.wantSubState)
			}
			newAttempt := tc.wantKind != ""
			if newAttempt != (row.hash != before.hash) || (newAttempt && (row.kind != tc.wantKind || row.attempts != 2)) {
				t.Fatalf("current attempt %s (%s, %d on record), want a new %q attempt: %v", row.hash.Hex(), row.kind, row.attempts, tc.wantKind, newAttempt)
			}
			if n := recorded.Load(); (n == 1) != newAttempt || n > 1 {
				t.Fatalf("told of %d recorded attempts, want one exactly when an attempt was recorded (%v)", n, newAttempt)
			}
			audits := s.audits(before.id)
			if len(audits) != 1 || audits[0].action != string(tc.action) || audits[0].nonce != 0 || audits[0].token != s.lease.Token ||
				!strings.Contains(audits[0].reason, tc.wantReason) {
				t.Fatalf("audits %+v, want one %s at nonce 0 under token %d whose reason says %q", audits, tc.action, s.lease.Token, tc.wantReason)
			}
			mined := s.minedAtNonceZero()
			if mined.Hash != row.hash || mined.Value.Cmp(big.NewInt(tc.wantValue)) != 0 || *mined.To != s.signer {
				t.Fatalf("mined at the nonce %s sending %s to %s, want the current attempt %s sending %d to the signer",
					mined.Hash.Hex(), mined.Value, mined.To.Hex(), row.hash.Hex(), tc.wantValue)
			}
		})
	}
}

// Without an action the hook decides, told the request is manual; a request without a
// reason is audited with one; a decision repeated on a transaction already in its state
// changes and audits nothing; a transaction that is not waiting is not found.
func TestResolveTxByTheHookAndRepeated(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	before := s.sendOne()
	hook := &askedHook{Hook: stuck.PolicyHook{Action: domain.ActionNoop}}
	r := s.resolver(stuck.Config{}, hook)

	got, err := r.ResolveTx(ctx(t), before.id, "", "")
	if err != nil || got != domain.ActionNoop {
		t.Fatalf("ResolveTx by the hook = %q, %v; want NOOP", got, err)
	}
	asked := hook.asked.Load()
	if asked == nil || !asked.Manual || asked.TxID != before.id || asked.Nonce != 0 || asked.SubmitAttempts != 1 || asked.PendingDepth != 1 ||
		asked.TxHash == nil || *asked.TxHash != before.hash {
		t.Fatalf("the hook was asked %+v, want the manual case of the waiting transaction", asked)
	}
	if _, err := r.ResolveTx(ctx(t), before.id, domain.ActionNoop, ""); err != nil {
		t.Fatal(err)
	}
	audits := s.audits(before.id)
	if len(audits) != 1 || !strings.Contains(audits[0].reason, "policy NOOP") {
		t.Fatalf("audits %+v, want only the hook's NOOP: a repeated NOOP claims nothing", audits)
	}
	// A STUCK transaction can still be resolved; the request without a reason gets one.
	if _, err := r.ResolveTx(ctx(t), before.id, domain.ActionCancel, ""); err != nil {
		t.Fatal(err)
	}
	if audits := s.audits(before.id); len(audits) != 2 || audits[1].action != string(domain.ActionCancel) || audits[1].reason != "manual resolution requested through the admin API" {
		t.Fatalf("audits %+v, want the CANCEL audited with the default reason", audits)
	}
	if row := s.row(); row.state != string(domain.StateTracking) || row.subState != string(domain.SubStateSubmitted) || row.kind != "CANCEL" {
		t.Fatalf("row %+v, want the STUCK transaction resolved by its cancellation", row)
	}

	if _, err := r.ResolveTx(ctx(t), uuid.New(), domain.ActionCancel, ""); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("ResolveTx of an unknown transaction: %v, want ErrNotFound", err)
	}
}

// The detector carries out whatever the hook answers; a hook that fails, or answers an
// action the stage does not know, claims and sends nothing.
func TestDetectStuckCarriesOutTheHooksDecision(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		hook    stuck.Hook
		wantErr string
		// wantSubState and wantKind: the row and its current attempt after the pass.
		wantSubState, wantKind string
	}{
		{name: "the hook replaces", hook: stuck.PolicyHook{Action: domain.ActionReplace}, wantSubState: string(domain.SubStateSubmitted), wantKind: "REPLACE"},
		{name: "the hook fails", hook: failingHook{}, wantErr: "stuck hook", wantSubState: "SIGNED", wantKind: "ORIGINAL"},
		{name: "the hook answers an unknown action", hook: stuck.PolicyHook{Action: "PRAY"}, wantErr: "unknown action", wantSubState: "SIGNED", wantKind: "ORIGINAL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			before := s.sendOne()
			r := s.resolver(stuck.Config{MinAttempts: 1}, tc.hook)

			_, err := r.DetectStuck(ctx(t), s.lease)
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("DetectStuck: %v, want error %q", err, tc.wantErr)
			}
			row := s.row()
			if row.state != string(domain.StateTracking) || row.subState != tc.wantSubState || row.kind != tc.wantKind {
				t.Fatalf("row %s/%s on a %s attempt, want TRACKING/%s on a %s attempt", row.state, row.subState, row.kind, tc.wantSubState, tc.wantKind)
			}
			if audited := len(s.audits(before.id)) > 0; audited != (tc.wantErr == "") {
				t.Fatalf("audited %v, want a claim only for a decision carried out", audited)
			}
		})
	}
}

// A node whose lease was lost claims nothing and sends nothing, and drops the lease the
// moment its claim is refused.
func TestResolutionIsFencedWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	before := s.sendOne()
	r := s.resolver(stuck.Config{MinAttempts: 1}, stuck.PolicyHook{Action: domain.ActionCancel})
	if err := repositories.NewLeaseRepository(s.pool, chainID).Release(ctx(t), s.lease); err != nil {
		t.Fatal(err)
	}

	_, err := r.DetectStuck(ctx(t), s.lease)
	var fenced *domain.FencedError
	if !errors.As(err, &fenced) {
		t.Fatalf("DetectStuck with a lost lease: %v, want a fenced claim", err)
	}
	if _, held := s.node.Leases.Current(s.lease.Signer); held {
		t.Fatal("the node still trusts the lease after a fenced claim")
	}
	if row := s.row(); row.hash != before.hash || row.subState != "SIGNED" || len(s.audits(before.id)) != 0 {
		t.Fatalf("row %+v, want it untouched and unaudited", row)
	}
	if mined := s.minedAtNonceZero(); mined.Hash != before.hash {
		t.Fatalf("mined %s at the nonce, want the original %s: no cancellation may be sent without the claim", mined.Hash.Hex(), before.hash.Hex())
	}
}

// askedHook is a policy that remembers the last case it was asked about.
type askedHook struct {
	stuck.Hook
	asked atomic.Pointer[stuck.Case]
}

func (h *askedHook) Decide(ctx context.Context, c stuck.Case) (stuck.Decision, error) {
	h.asked.Store(&c)
	return h.Hook.Decide(ctx, c)
}

// failingHook is a policy whose decision cannot be had (a remote policy service down).
type failingHook struct{}

func (failingHook) Decide(context.Context, stuck.Case) (stuck.Decision, error) {
	return stuck.Decision{}, errors.New("policy service unavailable")
}

// A head of line whose gas limit the node finds short of the L1 part is cancelled past the
// thresholds whatever the hook would say, once: when what is at its nonce after that
// resolution is still short (a cancellation the L1 part does not fit either), the hook is
// asked, and the default policy marks it STUCK for a person, rather than a cancellation
// being sent again every MinAge.
func TestAnL1ShortHeadIsCancelledOnceThenLeftToTheHook(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	hook := &askedHook{Hook: stuck.PolicyHook{}}
	r := s.resolver(stuck.Config{MinAttempts: 1}, hook)
	before := s.sendOne()
	short := func() {
		t.Helper()
		if _, err := s.pool.Exec(t.Context(), "UPDATE managed_tx SET sub_state = 'L1_GAS_SHORT', last_error = 'intrinsic gas too low' WHERE tx_id = $1", before.id); err != nil {
			t.Fatal(err)
		}
	}
	short()
	if found, err := r.DetectStuck(ctx(t), s.lease); err != nil || !found {
		t.Fatalf("first DetectStuck = %v, %v; want the short head resolved", found, err)
	}
	if hook.asked.Load() != nil {
		t.Fatal("the hook was asked about a head short of the L1 part the first time")
	}
	if audits := s.audits(before.id); len(audits) != 1 || audits[0].action != string(domain.ActionCancel) || !strings.Contains(audits[0].reason, "L1 part") {
		t.Fatalf("audits %+v, want one CANCEL naming the L1 part", audits)
	}
	short() // the cancellation is refused as short too
	if found, err := r.DetectStuck(ctx(t), s.lease); err != nil || !found {
		t.Fatalf("second DetectStuck = %v, %v; want the hook's decision", found, err)
	}
	if hook.asked.Load() == nil {
		t.Fatal("the hook was not asked after a cancellation that was still short")
	}
	if audits := s.audits(before.id); len(audits) != 2 || audits[1].action != string(domain.ActionNoop) {
		t.Fatalf("audits %+v, want the CANCEL then the policy's NOOP", audits)
	}
	if row := s.row(); row.state != string(domain.StateStuck) {
		t.Fatalf("row %+v, want STUCK for a person", row)
	}
}

// A resolution sent after an earlier attempt of ours was mined at the nonce is answered
// "nonce too low": the transaction there is ours, whichever attempt it is (the original,
// or an earlier resolution), so the row waits for its receipt and is not handed over as a
// nonce some other sender took.
func TestAResolutionAfterAnEarlierAttemptWasMinedKnowsItIsOurs(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	before := s.sendOne()
	mined := s.minedAtNonceZero() // the original, before any receipt is on record
	if mined.Hash != before.hash {
		t.Fatalf("mined %s at the nonce, want the original %s", mined.Hash.Hex(), before.hash.Hex())
	}
	r := s.resolver(stuck.Config{}, stuck.PolicyHook{})
	for i, action := range []domain.ResolutionAction{domain.ActionCancel, domain.ActionReplace} {
		if _, err := r.ResolveTx(ctx(t), before.id, action, "ops"); err != nil {
			t.Fatalf("resolution %d (%s): %v", i+1, action, err)
		}
		row := s.row()
		if row.state != string(domain.StateTracking) || row.subState != string(domain.SubStateSubmitted) {
			t.Fatalf("after resolution %d (%s), whose attempt the node refused as nonce too low: %s/%s (%s), want TRACKING/SUBMITTED awaiting the receipt of the original",
				i+1, action, row.state, row.subState, row.lastError)
		}
		if row.attempts != i+2 {
			t.Fatalf("after resolution %d: %d attempts on record, want %d", i+1, row.attempts, i+2)
		}
	}
}
