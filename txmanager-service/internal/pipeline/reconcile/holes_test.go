package reconcile_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A nonce hole (nonces below the lowest open one that nothing holds) is filled with
// placeholder self-transfers only once the same hole has lasted the grace period, so a
// transaction sent elsewhere that is still on its way is not raced; once filled, the
// transaction that waited above it is mined (docs/design.md#reconciliation).
func TestFillNonceHolesAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		off   bool
		grace time.Duration
		// waited is how far the clock moves between the two passes.
		waited                time.Duration
		wantFirst, wantSecond int
	}{
		{name: "no grace: filled at first sight", wantFirst: 2},
		{name: "filled once the hole has lasted the grace", grace: 30 * time.Second, waited: 31 * time.Second, wantSecond: 2},
		{name: "still within the grace: left alone", grace: 30 * time.Second, waited: 10 * time.Second},
		{name: "hole filling off", off: true, waited: time.Hour},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			clk := &clock{}
			r := s.reconciler(reconcile.Config{FillHoles: !tc.off, HoleGrace: tc.grace}, clk)
			s.openHole()

			first, err := r.FillNonceHoles(ctx(t), s.lease)
			if err != nil || first != tc.wantFirst {
				t.Fatalf("first pass filled %d, %v; want %d", first, err, tc.wantFirst)
			}
			clk.advance(tc.waited)
			second, err := r.FillNonceHoles(ctx(t), s.lease)
			if err != nil || second != tc.wantSecond {
				t.Fatalf("second pass filled %d, %v; want %d", second, err, tc.wantSecond)
			}
			rows := s.rows()
			if filled := tc.wantFirst + tc.wantSecond; len(rows) != filled+1 {
				t.Fatalf("rows %+v, want %d placeholders below the waiting transaction", rows, filled)
			}
			if len(rows) == 1 {
				return
			}
			for _, row := range rows[:2] {
				if !row.placeholder || row.state != string(domain.StateAllocated) || row.subState != "PLACEHOLDER" || row.to != s.signer.Hex() || row.value != "0" {
					t.Fatalf("row %+v, want an ALLOCATED placeholder sending 0 to the signer itself", row)
				}
			}
			s.submit()
			s.waitPending(3)
			s.mine(1)
			if mined, err := s.sim.NonceAt(ctx(t), s.signer); err != nil || mined != 3 {
				t.Fatalf("mined nonce %d, %v; want the waiting transaction mined above the placeholders (3)", mined, err)
			}
		})
	}
}

// Transactions sent outside the service that wait in one endpoint's pool only are no hole:
// the chain's pending nonce is the highest any endpoint reports. Asked of one endpoint that
// has not seen them, the service put placeholders over them, cancelling transactions that
// were not its own.
func TestTransactionsInOneEndpointsPoolAreNoHole(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.allocateAbovePending()
	without, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = without.Close() })
	endpoints, err := chain.NewMultiChain([]chain.Endpoint{{Name: "without-them", Chain: without.RPCChain}, {Name: "with-them", Chain: s.sim.RPCChain}},
		chain.MultiChainConfig{ReadTimeout: 5 * time.Second, SendTimeout: 5 * time.Second}, s.logger)
	if err != nil {
		t.Fatal(err)
	}
	r := s.reconcilerOn(endpoints, reconcile.Config{FillHoles: true}, &clock{})
	filled, err := r.FillNonceHoles(ctx(t), s.lease)
	if err != nil || filled != 0 {
		t.Fatalf("filled %d, %v; want no placeholder over nonces 0 and 1, pending at the second endpoint", filled, err)
	}
	if rows := s.rows(); len(rows) != 1 {
		t.Fatalf("rows %+v, want the allocated transaction alone", rows)
	}
}

// openHole makes the hole of the design: two transactions sent with the signer's key
// outside the service move the chain's pending nonce, the service (its chain term on, a
// key also used elsewhere) allocates nonce 2 above them, and then they are dropped from the
// node's pool: nonces 0 and 1 are held by nothing.
func (s *stage) openHole() {
	s.t.Helper()
	s.allocateAbovePending()
	s.sim.Backend().Rollback()
	s.waitPending(0)
}

// allocateAbovePending sends two transactions with the signer's key outside the service,
// and has the service (its chain term on) allocate nonce 2 above them.
func (s *stage) allocateAbovePending() {
	s.t.Helper()
	s.sendOutside(0, recipient, 1, params.GWei)
	s.sendOutside(1, recipient, 1, params.GWei)
	s.waitPending(2)
	allocator := writer.NewAllocator(s.node.TxManager, s.node.Store, s.node.Leases, s.sim, chainID, services.NewNonceCache(nil),
		writer.NonceConfig{ChainQuery: true, AdoptUnknownChainNonces: true}, services.SystemClock{}, nil, telemetry.Noop(), s.logger)
	op := writer.NewOp(s.t.Context(), domain.CreateRequest{Signer: s.signer, Intent: domain.Intent{To: &recipient, Value: big.NewInt(7), GasLimit: 21_000}}, 21_000)
	allocator.AllocateBatch(s.t.Context(), []*writer.Op{op})
	txs, errs := testsupport.Results(s.t, []*writer.Op{op})
	if errs[0] != nil || txs[0].Nonce != 2 {
		s.t.Fatalf("allocated %+v, %v; want nonce 2, above the chain's pending transactions", txs[0], errs[0])
	}
}
