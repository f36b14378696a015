package workers_test

import (
	"context"
	"math/big"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The keeper renews a lease in use past the lease's own duration, and releases one idle
// longer than the idle timeout, in the database too, so a peer takes the signer at once.
func TestLeaseKeeperRenewsLeasesInUseAndReleasesIdleOnes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		idle     time.Duration
		wantHeld bool
	}{
		{"a lease in use outlives its duration", time.Hour, true},
		{"an idle lease is released", 200 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			// Renewals every 150 ms keep a 1 s lease with room for a few slow statements on a
			// busy machine.
			const duration = time.Second
			leases := services.NewLeaseManager(services.LeaseConfig{Node: "keeper", Duration: duration, RenewInterval: 150 * time.Millisecond, Skew: 50 * time.Millisecond,
				IdleTimeout: tc.idle, NotLeaderRetryAfter: time.Second}, repositories.NewLeaseRepository(pool, chainID), services.SystemClock{}, telemetry.Noop(), testLogger())
			signer := testsupport.SignerAddress(1).Hex()
			first, err := leases.Acquire(t.Context(), signer)
			if err != nil {
				t.Fatal(err)
			}
			keeper := workers.NewLeaseKeeper(loopConfig(150*time.Millisecond), leases)
			keeper.Start(context.Background())
			time.Sleep(2 * duration)
			keeper.Stop()

			current, held := leases.Current(signer)
			var live bool
			if err := pool.QueryRow(t.Context(), "SELECT expires_at > now() FROM signer_lease WHERE signer = $1", signer).Scan(&live); err != nil {
				t.Fatal(err)
			}
			if held != tc.wantHeld || live != tc.wantHeld {
				t.Fatalf("after twice the lease's duration: held here %t, live in the database %t; want %t", held, live, tc.wantHeld)
			}
			if held && current.Token != first.Token {
				t.Fatalf("renewal changed the fencing token %d -> %d", first.Token, current.Token)
			}
		})
	}
}

// A node whose heartbeat runs stays alive in the registry past the node timeout; one
// whose heartbeat does not is gone after it, and peers stop forwarding to it.
func TestNodeHeartbeatKeepsTheNodeAlive(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		beat      bool
		wantAlive bool
	}{
		{"beating", true, true},
		{"silent", false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			const timeout = 600 * time.Millisecond
			self := services.NodeInfo{ID: "node-" + tc.name, Incarnation: "one", GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", StartedAt: time.Now().UTC()}
			registry := services.NewNodeRegistry(services.NodeConfig{Self: self, Timeout: timeout, HeartbeatInterval: 100 * time.Millisecond},
				repositories.NewNodeRepository(pool), testLogger())
			if err := registry.Join(t.Context()); err != nil {
				t.Fatal(err)
			}
			if tc.beat {
				heartbeat := workers.NewNodeHeartbeat(loopConfig(100*time.Millisecond), registry)
				heartbeat.Start(context.Background())
				defer heartbeat.Stop()
			}
			time.Sleep(5 * timeout / 2)
			_, alive, err := registry.LookupFresh(t.Context(), self.ID)
			if err != nil || alive != tc.wantAlive {
				t.Fatalf("after two and a half node timeouts: alive %t (%v), want %t", alive, err, tc.wantAlive)
			}
		})
	}
}

// rosterKeys stands for the signer registry (the roster's key side, outside this package):
// the state applied to each signer and whether its key is held.
type rosterKeys struct {
	mu     sync.Mutex
	states map[common.Address]domain.RosterState
}

func (k *rosterKeys) Check(domain.RosterSigner) error                   { return nil }
func (k *rosterKeys) Build(context.Context, domain.RosterSigner) error  { return nil }
func (k *rosterKeys) State(s common.Address) (domain.RosterState, bool) { return k.get(s) }
func (k *rosterKeys) Apply(e domain.RosterSigner) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.states[e.Signer] = e.State
}

func (k *rosterKeys) get(s common.Address) (domain.RosterState, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	state, ok := k.states[s]
	return state, ok && state != domain.RosterRetired
}

// A retirement recorded by another node's admin call reaches this node through its roster
// loop alone: with nothing unfinished the signer is retired, its key dropped and its lease
// let go.
func TestRosterLoopAppliesARetirementRecordedElsewhere(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(2)
	store := repositories.NewRosterRepository(pool)
	if err := store.RegisterConfigSigners(t.Context(), "roster-node", []common.Address{signer}); err != nil {
		t.Fatal(err)
	}
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "roster-node", Duration: 10 * time.Second, RenewInterval: 3 * time.Second, IdleTimeout: time.Minute},
		repositories.NewLeaseRepository(pool, chainID), services.SystemClock{}, telemetry.Noop(), testLogger())
	if _, err := leases.Acquire(t.Context(), signer.Hex()); err != nil {
		t.Fatal(err)
	}
	keys := &rosterKeys{states: map[common.Address]domain.RosterState{signer: domain.RosterActive}}
	roster := services.NewSignerRoster(services.RosterConfig{Node: "roster-node", PollInterval: 50 * time.Millisecond, BuildTimeout: time.Second},
		store, keys, []*services.LeaseManager{leases}, testsupport.TxManager(t, pool), testsupport.AuditTrail(t, pool, "roster-node"), testLogger())
	loop := workers.NewRosterLoop(roster, testLogger())
	loop.Start(context.Background())
	defer loop.Stop()

	if _, retiring, err := store.RetireRosterSigner(t.Context(), signer, "elsewhere", "rotation"); err != nil || !retiring {
		t.Fatalf("retire: %t, %v", retiring, err)
	}
	waitFor(t, 5*time.Second, "the retirement applied on this node", func() bool {
		state, held := keys.State(signer)
		return state == domain.RosterRetired && !held
	})
	if _, held := leases.Current(signer.Hex()); held {
		t.Fatal("the retired signer's lease is still held")
	}
}

// The retention loop deletes final transactions past the horizon, with their feed rows,
// and keeps younger ones.
func TestRetentionLoopPrunesPastTheHorizon(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	sequencer, err := services.NewFeedSequencer(component.Manager, repositories.NewCompletionRepository(pool), services.NewFeedNotifier(), telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	ages := map[string]time.Duration{"old": 48 * time.Hour, "young": time.Minute}
	for i, name := range []string{"old", "young"} {
		insertFinal(t, pool, name, i, time.Now().Add(-ages[name]))
	}
	if _, _, err := sequencer.Round(t.Context()); err != nil {
		t.Fatal(err)
	}
	retention := services.NewRetention(services.RetentionConfig{Horizon: 24 * time.Hour, BatchSize: 10, MaxBatches: 1}, repositories.NewRetentionRepository(pool),
		telemetry.Noop(), testLogger())
	loop := workers.NewRetentionLoop(loopConfig(50*time.Millisecond), retention, nil, testLogger())
	loop.Start(context.Background())
	defer loop.Stop()
	waitFor(t, 5*time.Second, "the old transaction deleted", func() bool { return countSigner(t, pool, "managed_tx", "old") == 0 })
	if countSigner(t, pool, "tx_completions", "old") != 0 {
		t.Fatal("the old transaction's feed row was kept")
	}
	if countSigner(t, pool, "managed_tx", "young") != 1 || countSigner(t, pool, "tx_completions", "young") != 1 {
		t.Fatal("the transaction younger than the horizon was deleted")
	}
}

// insertFinal writes a CONFIRMED transaction of signer, completed at completed, with its
// feed row not positioned yet (what reconciliation writes).
func insertFinal(t *testing.T, pool *pgxpool.Pool, signer string, nonce int, completed time.Time) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'CONFIRMED', 1, $4)`, id, signer, nonce, completed); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO tx_completions (chain_id, tx_id, signer, status, completed_at) VALUES (1337, $1, $2, 'CONFIRMED', $3)",
		id, signer, completed); err != nil {
		t.Fatal(err)
	}
	return id
}

// countSigner counts signer's rows in table.
func countSigner(t *testing.T, pool *pgxpool.Pool, table, signer string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM "+table+" WHERE signer = $1", signer).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Completions written without a feed position (by reconciliation or adoption, on any node)
// are positioned by the sequencer loop as soon as it is woken, not only at its interval.
func TestFeedSequencerLoopPositionsCompletionsWhenWoken(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	notifier := services.NewFeedNotifier()
	sequencer, err := services.NewFeedSequencer(component.Manager, repositories.NewCompletionRepository(pool), notifier, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	loop := workers.NewFeedSequencerLoop(loopConfig(time.Hour), sequencer, testLogger())
	loop.Start(context.Background())
	defer loop.Stop()
	for i := range 3 {
		insertFinal(t, pool, "reconciled", i, time.Now())
	}
	changed := notifier.Changed()
	loop.Wake()
	waitFor(t, 5*time.Second, "the completions positioned", func() bool {
		var unpositioned int
		if err := pool.QueryRow(t.Context(), "SELECT count(*) FROM tx_completions WHERE feed_position IS NULL").Scan(&unpositioned); err != nil {
			t.Fatal(err)
		}
		return unpositioned == 0
	})
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("this node's long-polls were not woken for the new positions")
	}
}

// countingBalances is the embedded chain, counting the balance reads the funds guard makes.
type countingBalances struct {
	services.FundsChain
	mu    sync.Mutex
	reads map[common.Address]int
}

func (c *countingBalances) AccountAt(ctx context.Context, account common.Address) (services.AccountState, error) {
	c.mu.Lock()
	c.reads[account]++
	c.mu.Unlock()
	return c.FundsChain.AccountAt(ctx, account)
}

func (c *countingBalances) readsOf(account common.Address) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[account]
}

// signerList is the signer directory: every signer managed, all accepted.
type signerList []common.Address

func (l signerList) Accepts(common.Address) error { return nil }
func (l signerList) Addresses() []common.Address  { return l }

// The funds gauge loop reads every managed signer's balance, including signers no create
// has asked about yet, so a signer running dry shows before its creates are refused.
func TestFundsGaugeLoopReadsEveryManagedSigner(t *testing.T) {
	t.Parallel()
	pool, sim := testsupport.MigratedPool(t), newSimulated(t)
	balances := &countingBalances{FundsChain: sim, reads: map[common.Address]int{}}
	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: time.Hour, Fees: services.FeePolicy{BumpPercent: 12, BaseFeeMultiplier: 2}},
		balances, repositories.NewFundsRepository(pool, chainID), services.SystemClock{}, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	signers := signerList{sim.DevAddresses()[0], testsupport.SignerAddress(9)}
	loop := workers.NewFundsGaugeLoop(loopConfig(time.Hour), guard, signers, testLogger())
	loop.Start(context.Background())
	defer loop.Stop()
	loop.Wake()
	waitFor(t, 5*time.Second, "every signer's balance read", func() bool {
		return balances.readsOf(signers[0]) > 0 && balances.readsOf(signers[1]) > 0
	})
	// The read is a snapshot the creates use: a funded signer is admitted without another.
	reads := balances.readsOf(signers[0])
	if _, err := guard.Reserve(t.Context(), signers[0], signers[0].Hex(), domain.Intent{Value: big.NewInt(1)}, 21000); err != nil {
		t.Fatalf("a funded signer refused: %v", err)
	}
	if got := balances.readsOf(signers[0]); got != reads {
		t.Fatalf("the create read the balance again (%d reads, want %d): the loop's snapshot was not kept", got, reads)
	}
}
