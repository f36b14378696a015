package reconcile_test

import (
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// A recovered transaction's completion waits for a retried create to adopt it; when its
// adoption window ends unadopted, the pass that notices releases the completion to the
// feed, and the transaction is no longer adoptable (docs/design.md#adopt-by-intent).
func TestExpireUnclaimedReleasesHeldBackCompletions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		window time.Duration
		// wantExpired: the recovered rows are no longer adoptable and have their completions.
		wantExpired bool
	}{
		{name: "the window has ended: completions go to the feed", window: time.Millisecond, wantExpired: true},
		{name: "the window is still open: completions wait for an adopter", window: time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			r := s.reconciler(reconcile.Config{RecoverByIntent: true, AdoptionWindow: tc.window, ResubmitInterval: time.Minute}, services.SystemClock{})
			s.allocate(1)
			s.submit()
			s.waitPending(1)
			s.mine(1)
			s.sendOutside(1, recipient, 5, params.GWei)
			s.sendOutside(2, recipient, 6, params.GWei)
			s.waitPending(3)
			s.mine(1)
			if out, err := r.Pass(ctx(t), s.lease); err != nil || out.Recorded != 2 {
				t.Fatalf("recovery pass: %+v, %v; want 2 recorded", out, err)
			}
			s.finalize()
			for _, row := range s.rows() {
				want := 1
				if row.recovered {
					want = 0 // held back for an adopter
				}
				if row.state != string(domain.StateConfirmed) || row.completions != want {
					t.Fatalf("row %+v after finality, want CONFIRMED with %d completions", row, want)
				}
			}

			if _, err := r.Pass(ctx(t), s.lease); err != nil {
				t.Fatal(err)
			}
			for _, row := range s.rows() {
				if !row.recovered {
					continue
				}
				if row.unclaimed == tc.wantExpired || (row.completions == 1) != tc.wantExpired {
					t.Fatalf("recovered row %+v, want its window ended (no longer adoptable, its completion written): %v", row, tc.wantExpired)
				}
			}
			if n, err := r.ExpireUnclaimed(ctx(t), s.lease); err != nil || n != 0 {
				t.Fatalf("expire again: %d, %v; want nothing left to expire", n, err)
			}
		})
	}
}

// finalize takes every mined transaction of the signer to its final state through the
// receipts stage: found by hash, then final at one confirmation.
func (s *stage) finalize() {
	s.t.Helper()
	tracker := receipts.New(receipts.Config{Confirmations: 1}, repositories.NewReceiptRepository(s.pool, chainID), s.sim, s.node.Leases, telemetry.Noop(), s.logger)
	signers := []string{s.lease.Signer}
	awaiting, err := tracker.AwaitingReceipt(ctx(s.t), signers)
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := tracker.CheckReceipts(ctx(s.t), awaiting)
	if err != nil {
		s.t.Fatal(err)
	}
	head, err := tracker.HeadNumber(ctx(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	if _, err := tracker.RecordReceipts(ctx(s.t), out.Found, head); err != nil {
		s.t.Fatal(err)
	}
	if _, err := tracker.AdvanceFinality(ctx(s.t), signers); err != nil {
		s.t.Fatal(err)
	}
}
