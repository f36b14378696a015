package chain_test

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

func TestBlockIntervalMinesUntilClose(t *testing.T) {
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, BlockInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)

	deadline := time.Now().Add(5 * time.Second)
	for {
		head, err := sim.LatestHeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if head.Number >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("head stuck at %d with a 50ms block interval", head.Number)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Manual commits share the miner's lock; under -race this would flag a data race in
	// the simulated beacon if they did not.
	for range 3 {
		sim.Commit()
	}

	started := time.Now()
	if err := sim.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Errorf("Close took %s, want it to stop the miner promptly", took)
	}
	if err := sim.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := sim.LatestHeader(ctx); err == nil {
		t.Error("LatestHeader succeeded after Close, want the closed client to refuse")
	}
	if got := sim.Commit(); got != (common.Hash{}) {
		t.Errorf("Commit after Close sealed block %s, want nothing", got)
	}
}

// TestCloseLeavesNoGoroutinesBehind compares goroutines around a mining chain's life. A
// first chain is created and closed beforehand because go-ethereum starts some
// process-wide goroutines on first use that are not the chain's to stop.
func TestCloseLeavesNoGoroutinesBehind(t *testing.T) {
	warmUp, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, BlockInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := warmUp.Close(); err != nil {
		t.Fatal(err)
	}
	baseline, _ := settledGoroutines(func(int) bool { return false })

	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, BlockInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := sim.Close(); err != nil {
		t.Fatal(err)
	}
	if after, stacks := settledGoroutines(func(n int) bool { return n <= baseline }); after > baseline {
		t.Errorf("%d goroutines after Close, %d before; stacks:\n%s", after, baseline, strings.Join(stacks, "\n\n"))
	}
}

// settledGoroutines polls for up to two seconds, because node shutdown lets some
// goroutines exit shortly after Close returns. It stops once done accepts the count or the
// count has held still for 200ms.
func settledGoroutines(done func(int) bool) (int, []string) {
	deadline := time.Now().Add(2 * time.Second)
	stacks := relevantGoroutines()
	stableSince := time.Now()
	for !done(len(stacks)) && time.Since(stableSince) < 200*time.Millisecond && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		if next := relevantGoroutines(); len(next) != len(stacks) {
			stacks, stableSince = next, time.Now()
		}
	}
	return len(stacks), stacks
}

// relevantGoroutines returns the stacks of all goroutines except goleveldb's pool drainer,
// which by design outlives its database by a second (go-ethereum's own leak test ignores it
// too).
func relevantGoroutines() []string {
	buf := make([]byte, 1<<20)
	var stacks []string
	for _, stack := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if !strings.Contains(stack, "leveldb.(*DB).mpoolDrain") {
			stacks = append(stacks, stack)
		}
	}
	return stacks
}
