package services_test

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// fundsChain answers only what the funds guard asks; every other Chain method is absent.
type fundsChain struct {
	services.Chain
	balance *big.Int
	reads   int
}

func (c *fundsChain) AccountAt(context.Context, common.Address) (services.AccountState, error) {
	c.reads++
	return services.AccountState{Balance: new(big.Int).Set(c.balance)}, nil
}

func (c *fundsChain) SuggestFees(context.Context) (services.FeeSuggestion, error) {
	return services.FeeSuggestion{BaseFee: big.NewInt(10), TipCap: big.NewInt(1)}, nil
}

type fixedCost struct{ cost *big.Int }

func (f fixedCost) UnminedCost(context.Context, string, uint64, *big.Int) (*big.Int, error) {
	return new(big.Int).Set(f.cost), nil
}

type steppedClock struct{ now time.Time }

func (c *steppedClock) Now() time.Time { return c.now }

// Fee cap for intents without their own: 2 x base fee 10 + tip 1 = 21 wei per gas.
func TestFundsGuardReserve(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	transfer := func(value int64) domain.Intent { return domain.Intent{Value: big.NewInt(value)} }
	tests := []struct {
		name      string
		balance   int64
		committed int64
		intents   []domain.Intent // reserved one after another, gas limit 1000 each
		admitted  int             // how many pass before the first refusal
	}{
		{"exactly affordable", 21_000 + 5, 0, []domain.Intent{transfer(5)}, 1},
		{"one wei short", 21_000 + 4, 0, []domain.Intent{transfer(5)}, 0},
		{"unfinished transactions count", 100_000, 60_000, []domain.Intent{transfer(0), transfer(0)}, 1},
		{"admitted creates count before their rows exist", 3 * 21_000, 0, []domain.Intent{transfer(0), transfer(0), transfer(0), transfer(0)}, 3},
		{"the intent's own fee cap prices its gas", 1_000, 0, []domain.Intent{{Value: big.NewInt(0), MaxFeePerGas: big.NewInt(1)}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
			chain := &fundsChain{balance: big.NewInt(tc.balance)}
			guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second},
				chain, fixedCost{big.NewInt(tc.committed)}, clock, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for _, intent := range tc.intents {
				_, err := guard.Reserve(context.Background(), signer, signer.Hex(), intent, 1000)
				if err != nil {
					if !errors.Is(err, domain.ErrInsufficientFunds) {
						t.Fatalf("refusal %v does not match ErrInsufficientFunds", err)
					}
					break
				}
				admitted++
			}
			if admitted != tc.admitted {
				t.Fatalf("admitted %d of %d, want %d", admitted, len(tc.intents), tc.admitted)
			}
		})
	}
}

func TestFundsGuardReleaseAndRefresh(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
	chain := &fundsChain{balance: big.NewInt(21_000)}
	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second}, chain, fixedCost{new(big.Int)}, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	intent := domain.Intent{Value: big.NewInt(0)}
	first, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); !errors.Is(err, domain.ErrInsufficientFunds) {
		t.Fatalf("second reservation on a balance for one: %v, want ErrInsufficientFunds", err)
	}
	// A create that failed gives its share back.
	first.Release()
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if chain.reads != 1 {
		t.Fatalf("balance read %d times within the cache period, want 1", chain.reads)
	}
	// Funded later: an old snapshot is not trusted for a refusal; the balance is read again.
	chain.balance = big.NewInt(1_000_000)
	clock.now = clock.now.Add(time.Second)
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); err != nil {
		t.Fatalf("after funding: %v", err)
	}
	if chain.reads != 2 {
		t.Fatalf("balance read %d times, want 2 (one reload before refusing)", chain.reads)
	}
	// With the check off everything is admitted and nothing is read.
	off, err := services.NewFundsGuard(services.FundsConfig{}, chain, fixedCost{new(big.Int)}, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := off.Reserve(ctx, signer, signer.Hex(), domain.Intent{Value: big.NewInt(1 << 62)}, 1000); err != nil || r != nil {
		t.Fatalf("check off: %v, %v", r, err)
	}
}

// writtenCost is a committed-cost store holding what the rows written so far cost.
type writtenCost struct{ cost *big.Int }

func (w *writtenCost) UnminedCost(context.Context, string, uint64, *big.Int) (*big.Int, error) {
	return new(big.Int).Set(w.cost), nil
}

// A reload reads the cost of the rows written; a create admitted before it whose row is not
// written yet (a batch of a thousand from one signer waits for several writer batches) stays
// reserved, one whose row the reload read is counted once, and one that wrote nothing is
// not counted. Before, a reload kept only the reservations made while it ran, so a batch
// larger than the balance was admitted in full after the first reload.
func TestFundsGuardReloadCountsWhatItsQueryCannotSee(t *testing.T) {
	const oneCreate = 21_000 // gas 1000 x 21 wei
	tests := []struct {
		name string
		// finish is what became of the first create before the reload.
		finish  func(r *services.Reservation, rows *writtenCost)
		balance int64
		// admitted is how many more creates the reloaded view admits.
		admitted int
	}{
		{"on its way to the writer", func(*services.Reservation, *writtenCost) {}, oneCreate, 0},
		{"on its way to the writer, balance for two", func(*services.Reservation, *writtenCost) {}, 2 * oneCreate, 1},
		{"written", func(r *services.Reservation, rows *writtenCost) { r.Settle(); rows.cost.SetInt64(oneCreate) }, oneCreate, 0},
		{"written, balance for two", func(r *services.Reservation, rows *writtenCost) { r.Settle(); rows.cost.SetInt64(oneCreate) }, 2 * oneCreate, 1},
		{"refused by the writer", func(r *services.Reservation, _ *writtenCost) { r.Release() }, oneCreate, 1},
		{"outcome unknown, and no row was written", func(r *services.Reservation, _ *writtenCost) { r.Settle() }, oneCreate, 1},
		{"settled twice, then released", func(r *services.Reservation, rows *writtenCost) {
			r.Settle()
			r.Settle()
			r.Release()
			rows.cost.SetInt64(oneCreate)
		}, 2 * oneCreate, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			signer := common.HexToAddress("0x00000000000000000000000000000000000000cc")
			clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
			chain := &fundsChain{balance: big.NewInt(oneCreate)}
			rows := &writtenCost{cost: new(big.Int)}
			guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second}, chain, rows, clock, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			intent := domain.Intent{Value: big.NewInt(0)}
			first, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000)
			if err != nil {
				t.Fatal(err)
			}
			tc.finish(first, rows)
			chain.balance = big.NewInt(tc.balance)
			clock.now = clock.now.Add(5 * time.Second) // past twice the reuse window: the next create waits for a reload
			admitted := 0
			for range 3 {
				r, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000)
				if errors.Is(err, domain.ErrInsufficientFunds) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				admitted++
				r.Settle()
				rows.cost.Add(rows.cost, big.NewInt(oneCreate))
			}
			if chain.reads < 2 {
				t.Fatalf("balance read %d times, want a reload", chain.reads)
			}
			if admitted != tc.admitted {
				t.Fatalf("%d creates admitted after the reload, want %d", admitted, tc.admitted)
			}
		})
	}
}

// gatedCost is a committed-cost store whose reads wait until the gate of the moment is
// closed, as a read of a hot signer's long backlog takes its time.
type gatedCost struct {
	mu      sync.Mutex
	gate    chan struct{}
	started chan struct{} // receives once per read
}

func (g *gatedCost) setGate(gate chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = gate
}

func (g *gatedCost) UnminedCost(ctx context.Context, _ string, _ uint64, _ *big.Int) (*big.Int, error) {
	g.mu.Lock()
	gate := g.gate
	g.mu.Unlock()
	g.started <- struct{}{}
	select {
	case <-gate:
		return new(big.Int), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// lockedClock is a settable clock the guard's background reload may read meanwhile.
type lockedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *lockedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *lockedClock) set(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// A snapshot past CacheFor is reloaded in the background while creates go on being admitted
// on it (one reload at a time); one past twice CacheFor makes a create wait for the reload.
func TestFundsGuardReloadsWithoutHoldingCreates(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000cc")
	start := time.Unix(1_700_000_000, 0)
	clock := &lockedClock{now: start}
	chain := &fundsChain{balance: big.NewInt(100 * 21_000)}
	open := make(chan struct{})
	close(open)
	store := &gatedCost{gate: open, started: make(chan struct{}, 8)}
	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second}, chain, store, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserve := func() <-chan error {
		done := make(chan error, 1)
		go func() {
			_, err := guard.Reserve(ctx, signer, signer.Hex(), domain.Intent{Value: big.NewInt(0)}, 1000)
			done <- err
		}()
		return done
	}
	if err := <-reserve(); err != nil {
		t.Fatal(err)
	}
	<-store.started

	// Past CacheFor, the reload is slow: creates do not wait for it.
	slow := make(chan struct{})
	store.setGate(slow)
	clock.set(start.Add(3 * time.Second))
	for i := range 5 {
		select {
		case err := <-reserve():
			if err != nil {
				t.Fatalf("create %d while the snapshot is reloaded: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("create %d waited for the background reload", i)
		}
	}
	<-store.started
	select {
	case <-store.started:
		t.Fatal("a second reload started while one was running")
	default:
	}

	// Past twice CacheFor the snapshot is not used: the create waits for the reload.
	clock.set(start.Add(4500 * time.Millisecond))
	waiting := reserve()
	select {
	case err := <-waiting:
		t.Fatalf("a create was admitted on a snapshot twice CacheFor old: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(slow)
	if err := <-waiting; err != nil {
		t.Fatalf("after the reload: %v", err)
	}
}

// slowCost is a committed-cost store whose read takes a second of the guard's clock.
type slowCost struct {
	clock *lockedClock
	reads *atomic.Int32
}

func (s slowCost) UnminedCost(context.Context, string, uint64, *big.Int) (*big.Int, error) {
	s.reads.Add(1)
	s.clock.set(s.clock.Now().Add(time.Second))
	return new(big.Int), nil
}

// A signer whose reload takes a second is reloaded every reloadCostFactor (10) seconds,
// not every CacheFor: the reload's query costs the database in proportion to the backlog.
func TestFundsGuardSpacesSlowReloads(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000dd")
	start := time.Unix(1_700_000_000, 0)
	clock := &lockedClock{now: start}
	reads := &atomic.Int32{}
	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second},
		&fundsChain{balance: big.NewInt(1_000 * 21_000)}, slowCost{clock: clock, reads: reads}, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	reserve := func() {
		t.Helper()
		if _, err := guard.Reserve(ctx, signer, signer.Hex(), domain.Intent{Value: big.NewInt(0)}, 1000); err != nil {
			t.Fatal(err)
		}
	}
	reserve() // the first read: the snapshot is from start, the read took until start+1s
	tests := []struct {
		at    time.Duration // since start
		reads int32         // reads so far once a create at that time has been admitted
	}{
		{3 * time.Second, 1},  // past CacheFor, within ten times the read's second
		{9 * time.Second, 1},  // still within
		{11 * time.Second, 2}, // past: reloaded (in the background: the snapshot is not twice as old)
	}
	for _, tc := range tests {
		clock.set(start.Add(tc.at))
		reserve()
		waitUntil(t, func() bool { return reads.Load() >= tc.reads })
		time.Sleep(10 * time.Millisecond) // a read that should not happen has had its chance
		if got := reads.Load(); got != tc.reads {
			t.Fatalf("at +%s: %d reads, want %d", tc.at, got, tc.reads)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(time.Millisecond)
	}
}
