package writer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

func newPolicyBook(t *testing.T, pool *pgxpool.Pool) *services.PolicyBook {
	t.Helper()
	return testsupport.PolicyBook(t, pool, testsupport.AuditTrail(t, pool, "policy-test"))
}

// allocateOne runs one writer batch of one create and answers it.
func allocateOne(t *testing.T, n *testsupport.WriterNode, req domain.CreateRequest, gas uint64) (domain.ManagedTx, bool, error) {
	t.Helper()
	op := writer.NewOp(t.Context(), req, gas)
	n.Allocator.AllocateBatch(context.Background(), []*writer.Op{op})
	return op.Wait(t.Context())
}

// Each rule of a spending policy admits what it allows and refuses, before a nonce, what
// it does not, naming itself; a refused create consumes no nonce (the next admitted one
// takes the nonce the refused one would have had).
func TestEveryPolicyRuleRefusesBeforeANonce(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	book := newPolicyBook(t, pool)
	allowed, other := common.HexToAddress("0x00000000000000000000000000000000000a11ce"), common.HexToAddress("0x0000000000000000000000000000000000000b0b")
	transfer := domain.Intent{To: &allowed, Value: big.NewInt(10), GasLimit: 21000}
	call := func(to common.Address, selector string) domain.Intent {
		data := common.FromHex(selector + "0000000000000000000000000000000000000000000000000000000000000001")
		return domain.Intent{To: &to, Value: new(big.Int), Data: data, GasLimit: 60000}
	}
	with := func(i domain.Intent, mutate func(*domain.Intent)) domain.Intent { mutate(&i); return i }
	admission := domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(100), RemainingAfter: big.NewInt(1000)}
	adm := func(mutate func(*domain.Admission)) domain.Admission { a := admission; mutate(&a); return a }

	tests := []struct {
		name      string
		scopeKind string // signer (default) or credential "payouts"
		policy    string
		intent    domain.Intent
		admission domain.Admission
		wantRule  string // "" admitted
	}{
		{"listed destination", "", `{"destinations":[{"address":"` + allowed.Hex() + `"}]}`, transfer, admission, ""},
		{"unlisted destination", "", `{"destinations":[{"address":"` + allowed.Hex() + `"}]}`, with(transfer, func(i *domain.Intent) { i.To = &other }), admission, domain.PolicyRuleDestination},
		{"empty allowlist", "", `{"destinations":[]}`, transfer, admission, domain.PolicyRuleDestination},
		{"contract creation", "", `{"destinations":[{"address":"` + allowed.Hex() + `"}]}`, with(transfer, func(i *domain.Intent) { i.To = nil; i.Data = []byte{0x60} }), admission, domain.PolicyRuleDestination},
		{"allowed selector", "", `{"destinations":[{"address":"` + allowed.Hex() + `","selectors":["0xa9059cbb"]}]}`, call(allowed, "0xa9059cbb"), admission, ""},
		{"other selector", "", `{"destinations":[{"address":"` + allowed.Hex() + `","selectors":["0xa9059cbb"]}]}`, call(allowed, "0x095ea7b3"), admission, domain.PolicyRuleSelector},
		{"no selector where selectors are listed", "", `{"destinations":[{"address":"` + allowed.Hex() + `","selectors":["0xa9059cbb"]}]}`, transfer, admission, domain.PolicyRuleSelector},
		{"value at the limit", "", `{"maxValuePerTx":"10"}`, transfer, admission, ""},
		{"value above the limit", "", `{"maxValuePerTx":"9"}`, transfer, admission, domain.PolicyRuleMaxValue},
		{"fee cap at the limit", "", `{"maxFeePerGas":"100"}`, transfer, admission, ""},
		{"fee cap above the limit", "", `{"maxFeePerGas":"99"}`, transfer, admission, domain.PolicyRuleMaxFeePerGas},
		{"no fee cap at all", "", `{"maxFeePerGas":"99"}`, transfer, adm(func(a *domain.Admission) { a.FeeCapPerGas = nil }), domain.PolicyRuleMaxFeePerGas},
		{"balance left at the minimum", "", `{"minRemainingBalance":"1000"}`, transfer, admission, ""},
		{"balance left under the minimum", "", `{"minRemainingBalance":"1001"}`, transfer, admission, domain.PolicyRuleMinBalance},
		{"balance not checked", "", `{"minRemainingBalance":"1"}`, transfer, adm(func(a *domain.Admission) { a.RemainingAfter = nil }), domain.PolicyRuleMinBalance},
		{"window value fits", "", `{"windows":[{"period":"1h","maxValue":"10"}]}`, transfer, admission, ""},
		{"window value exceeded", "", `{"windows":[{"period":"24h","maxValue":"9"}]}`, transfer, admission, domain.PolicyRuleWindowValue},
		{"window fee fits", "", `{"windows":[{"period":"1h","maxFee":"2100000"}]}`, transfer, admission, ""},
		{"window fee exceeded", "", `{"windows":[{"period":"1h","maxFee":"2099999"}]}`, transfer, admission, domain.PolicyRuleWindowFee},
		{"credential policy binds its credential", "credential", `{"maxValuePerTx":"9"}`, transfer, admission, domain.PolicyRuleMaxValue},
		{"credential policy leaves other credentials", "credential", `{"maxValuePerTx":"9"}`, transfer, adm(func(a *domain.Admission) { a.Credential = "other" }), ""},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			signer := testsupport.SignerAddress(100 + i)
			kind, scope := "signer", signer.Hex()
			if tc.scopeKind == "credential" {
				// One credential id per case: the cases run one after another on one database.
				kind, scope = "credential", fmt.Sprintf("payouts-%d", i)
				if tc.admission.Credential == "payouts" {
					tc.admission.Credential = scope
				}
			}
			if _, err := book.Set(t.Context(), kind, scope, []byte(tc.policy), "ops@example"); err != nil {
				t.Fatalf("set policy: %v", err)
			}
			tx, created, err := allocateOne(t, node, domain.CreateRequest{Signer: signer, RequestID: "r-1", Intent: tc.intent, Admission: tc.admission}, tc.intent.GasLimit)
			if tc.wantRule == "" {
				if err != nil || !created || tx.Nonce != 0 {
					t.Fatalf("got nonce %d created %v err %v, want admitted at nonce 0", tx.Nonce, created, err)
				}
				return
			}
			var denied *domain.PolicyDeniedError
			if !errors.As(err, &denied) || denied.Rule != tc.wantRule {
				t.Fatalf("got %v, want POLICY_DENIED by rule %s", err, tc.wantRule)
			}
			if created || tx.Nonce != 0 || denied.Version != 1 {
				t.Errorf("a refusal answered created=%v nonce=%d version %d", created, tx.Nonce, denied.Version)
			}
			t.Logf("%s", denied.Error())
			// Nothing was allocated: with the policy gone the same signer's next create
			// takes nonce 0, and the refused requestId is free.
			if _, err := book.Delete(t.Context(), kind, scope, "ops@example"); err != nil {
				t.Fatal(err)
			}
			tx, created, err = allocateOne(t, node, domain.CreateRequest{Signer: signer, RequestID: "r-1", Intent: tc.intent, Admission: tc.admission}, tc.intent.GasLimit)
			if err != nil || !created || tx.Nonce != 0 {
				t.Fatalf("after the refusal: nonce %d created %v err %v, want created at nonce 0", tx.Nonce, created, err)
			}
		})
	}
}

// A window counts every create it admitted, across batches, and refuses the one that would
// cross it while a smaller one that fits still goes in.
func TestWindowCountsWhatItAdmitted(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	book := newPolicyBook(t, pool)
	signer := testsupport.SignerAddress(7)
	if _, err := book.Set(t.Context(), "signer", signer.Hex(), []byte(`{"windows":[{"period":"1h","maxValue":"10"},{"period":"24h","maxValue":"100"}]}`), "ops"); err != nil {
		t.Fatal(err)
	}
	values := []int64{4, 4, 4, 2, 1}
	wantAdmitted := []bool{true, true, false, true, false}
	for i, v := range values {
		to := signer
		req := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(v), GasLimit: 21000}, Admission: domain.Admission{FeeCapPerGas: big.NewInt(1)}}
		_, created, err := allocateOne(t, node, req, 21000)
		if created != wantAdmitted[i] || (created && err != nil) || (!created && !errors.Is(err, domain.ErrPolicyDenied)) {
			t.Fatalf("create %d (value %d): created %v err %v, want admitted %v", i, v, created, err, wantAdmitted[i])
		}
	}
	var counted string
	if err := pool.QueryRow(t.Context(), `SELECT sum(value_wei)::text FROM policy_spend WHERE scope = $1`, signer.Hex()).Scan(&counted); err != nil {
		t.Fatal(err)
	}
	if counted != "10" {
		t.Errorf("the window's buckets count %s wei, want 10 (4+4+2)", counted)
	}
}

// Three nodes admit for one credential at once, each on its own signer (a credential's
// window spans every signer it uses and so every node): 200 concurrent creates straddling
// the window's limit, each sent to the node owning the signer picked at random. The total
// admitted never exceeds the limit by one wei, and no create was refused that would have
// fitted when it was checked (every refused one still does not fit what was admitted).
func TestWindowLimitsHoldAcrossNodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		window string
		// value and fee cap of create i (worst-case fee: 21000 x fee cap).
		value, feeCap func(r *rand.Rand) int64
		amount        func(value, feeCap int64) int64
	}{
		{"value", "maxValue", func(r *rand.Rand) int64 { return 1 + r.Int64N(1000) }, func(*rand.Rand) int64 { return 1 }, func(v, _ int64) int64 { return v }},
		{"fee", "maxFee", func(*rand.Rand) int64 { return 0 }, func(r *rand.Rand) int64 { return 1 + r.Int64N(1000) }, func(_, f int64) int64 { return 21000 * f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			nodes := make([]*testsupport.WriterNode, 3)
			signers := make([]common.Address, 3)
			for i := range nodes {
				nodes[i] = testsupport.NewWriterNode(t, pool, fmt.Sprintf("node-%d", i), testsupport.WriterNodeOptions{})
				signers[i] = testsupport.SignerAddress(200 + i)
			}
			r := rand.New(rand.NewPCG(7, 11))
			const creates = 200
			values, feeCaps, owners := make([]int64, creates), make([]int64, creates), make([]int, creates)
			var sum int64
			for i := range creates {
				values[i], feeCaps[i], owners[i] = tc.value(r), tc.feeCap(r), r.IntN(3)
				sum += tc.amount(values[i], feeCaps[i])
			}
			limit := sum / 2
			policy := fmt.Sprintf(`{"windows":[{"period":"24h","%s":"%d"}]}`, tc.window, limit)
			if _, err := newPolicyBook(t, pool).Set(t.Context(), "credential", "payouts", []byte(policy), "ops"); err != nil {
				t.Fatal(err)
			}
			// Each node's writer as the service runs it: several workers, one signer's creates
			// in one worker's queue, batches formed by what queues up meanwhile.
			writers := make([]*writer.Writer, len(nodes))
			for i, n := range nodes {
				w, err := writer.New(writer.QueueConfig{Workers: 4, BatchSize: 16, QueueSize: creates}, n.Allocator, telemetry.Noop())
				if err != nil {
					t.Fatal(err)
				}
				w.Start(t.Context())
				t.Cleanup(func() { w.Stop(context.Background()) })
				writers[i] = w
			}
			type answer struct {
				created bool
				err     error
			}
			answers := make([]answer, creates)
			var wg sync.WaitGroup
			for i := range creates {
				signer := signers[owners[i]]
				req := domain.CreateRequest{Signer: signer, SignerHex: signer.Hex(), RequestID: fmt.Sprintf("c-%d", i),
					Intent:    domain.Intent{To: &signer, Value: big.NewInt(values[i]), GasLimit: 21000},
					Admission: domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(feeCaps[i])}}
				wg.Go(func() {
					_, created, err := writers[owners[i]].Allocate(t.Context(), req, 21000, nil)
					answers[i] = answer{created, err}
				})
			}
			wg.Wait()
			var admitted int64
			var refused []int
			for i, a := range answers {
				created, err := a.created, a.err
				switch {
				case created:
					admitted += tc.amount(values[i], feeCaps[i])
				case errors.Is(err, domain.ErrPolicyDenied):
					refused = append(refused, i)
				default:
					t.Fatalf("create %d: %v", i, err)
				}
			}
			if admitted > limit {
				t.Fatalf("admitted %d wei under a limit of %d: %d over", admitted, limit, admitted-limit)
			}
			if len(refused) == 0 {
				t.Fatalf("nothing refused: the creates (%d wei) did not straddle the limit %d", sum, limit)
			}
			for _, i := range refused {
				if amount := tc.amount(values[i], feeCaps[i]); admitted+amount <= limit {
					t.Errorf("create %d (%d wei) was refused though it fits: %d admitted of %d", i, amount, admitted, limit)
				}
			}
			var rows int
			if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM managed_tx`).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if rows != creates-len(refused) {
				t.Errorf("%d transactions written, want %d admitted", rows, creates-len(refused))
			}
			t.Logf("%s window: %d creates on 3 nodes, limit %d wei, admitted %d wei (%d creates), refused %d, headroom left %d wei",
				tc.name, creates, limit, admitted, rows, len(refused), limit-admitted)
		})
	}
}

// A create refused by a policy and its repeat in the same batch (the same requestId and
// intent) are both refused: the repeat is not answered with a transaction never written.
func TestARefusedCreatesRepeatInTheBatchIsRefusedToo(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(41)
	if _, err := newPolicyBook(t, pool).Set(t.Context(), "signer", signer.Hex(), []byte(`{"maxValuePerTx":"1"}`), "ops"); err != nil {
		t.Fatal(err)
	}
	req := domain.CreateRequest{Signer: signer, RequestID: "twice", Intent: domain.Intent{To: &signer, Value: big.NewInt(2), GasLimit: 21000}}
	ops := []*writer.Op{writer.NewOp(t.Context(), req, 21000), writer.NewOp(t.Context(), req, 21000)}
	node.Allocator.AllocateBatch(context.Background(), ops)
	for i, op := range ops {
		tx, created, err := op.Wait(t.Context())
		if !errors.Is(err, domain.ErrPolicyDenied) || created || tx.ID != (uuid.UUID{}) {
			t.Errorf("op %d: tx %s created %v err %v, want POLICY_DENIED and no transaction", i, tx.ID, created, err)
		}
	}
}

// Two nodes whose batches carry creates of two credentials on two signers each, in opposite
// orders, lock the credentials' policies in one order (all of a batch's first, sorted): no
// deadlock between them, however the batches interleave. (Locking part by part, the same
// run fails creates with UNAVAILABLE: each batch waits on the other's lock until the lock
// timeout cancels it.)
func TestBatchesOfTwoNodesLockPoliciesInOneOrder(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	book := newPolicyBook(t, pool)
	for _, c := range []string{"c1", "c2"} {
		if _, err := book.Set(t.Context(), "credential", c, []byte(`{"windows":[{"period":"24h","maxValue":"1000000000"}]}`), "ops"); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []*testsupport.WriterNode{testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{}), testsupport.NewWriterNode(t, pool, "node-b", testsupport.WriterNodeOptions{})}
	to := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	create := func(signer common.Address, credential string) *writer.Op {
		req := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(1), GasLimit: 21000},
			Admission: domain.Admission{Credential: credential, FeeCapPerGas: big.NewInt(1)}}
		return writer.NewOp(t.Context(), req, 21000)
	}
	var deadlocksBefore int64
	if err := pool.QueryRow(t.Context(), `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocksBefore); err != nil {
		t.Fatal(err)
	}
	// Each node's writer runs its batches one after another (one worker per signer, as in
	// the service); the two nodes run side by side.
	const rounds = 60
	var wg sync.WaitGroup
	failures := make(chan error, rounds*4)
	for i, n := range nodes {
		wg.Go(func() {
			for round := range rounds {
				// node-a: its first signer with c1, its second with c2; node-b the other way.
				first, second := testsupport.SignerAddress(500+2*i), testsupport.SignerAddress(501+2*i)
				credentials := []string{"c1", "c2"}
				if i == 1 {
					credentials = []string{"c2", "c1"}
				}
				ops := []*writer.Op{create(first, credentials[0]), create(second, credentials[1])}
				n.Allocator.AllocateBatch(context.Background(), ops)
				for _, op := range ops {
					if _, _, err := op.Wait(t.Context()); err != nil {
						failures <- fmt.Errorf("round %d, %s: %w", round, n.Leases.Node(), err)
					}
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Fatal(err)
	}
	var deadlocksAfter int64
	if err := pool.QueryRow(t.Context(), `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&deadlocksAfter); err != nil {
		t.Fatal(err)
	}
	if deadlocksAfter != deadlocksBefore {
		t.Fatalf("%d deadlocks between the two nodes' batches, want none", deadlocksAfter-deadlocksBefore)
	}
	t.Logf("%d rounds of two crossed batches on two nodes: every create admitted, 0 deadlocks", rounds)
}

// One key on two chains spends two currencies: a signer's window counts each chain's
// spending on its own, so spending up to the limit on one chain leaves the other's window
// whole, and the limit still holds on each.
func TestWindowsCountEachChainOnItsOwn(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	book := newPolicyBook(t, pool)
	signer := testsupport.SignerAddress(8)
	if _, err := book.Set(t.Context(), "signer", signer.Hex(), []byte(`{"windows":[{"period":"1h","maxValue":"10"}]}`), "ops"); err != nil {
		t.Fatal(err)
	}
	nodeOn := func(chain services.ChainID) *writer.Allocator {
		manager, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: log.NewStdLogger(io.Discard)})
		if err != nil {
			t.Fatal(err)
		}
		leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a", Duration: 10 * time.Second, RenewInterval: 2 * time.Second, IdleTimeout: time.Minute,
			NotLeaderRetryAfter: time.Second}, repositories.NewLeaseRepository(pool, chain), services.SystemClock{}, telemetry.Noop(), log.NewStdLogger(io.Discard))
		return writer.NewAllocator(manager.Manager, repositories.NewAllocationRepository(chain), leases, nil, chain, services.NewNonceCache(nil),
			writer.NonceConfig{}, services.SystemClock{}, nil, telemetry.Noop(), log.NewStdLogger(io.Discard))
	}
	chains := []*writer.Allocator{nodeOn(testsupport.TestChain()), nodeOn(services.ChainID{Int: big.NewInt(137)})}
	create := func(on *writer.Allocator, value int64) error {
		to := signer
		op := writer.NewOp(t.Context(), domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(value), GasLimit: 21000},
			Admission: domain.Admission{FeeCapPerGas: big.NewInt(1)}}, 21000)
		on.AllocateBatch(context.Background(), []*writer.Op{op})
		_, _, err := op.Wait(t.Context())
		return err
	}
	steps := []struct {
		chain   int
		value   int64
		refused bool
	}{
		{0, 10, false}, // the first chain's window is full
		{1, 1, false},  // the other's is not
		{1, 9, false},
		{1, 1, true},
		{0, 1, true},
	}
	for i, s := range steps {
		if err := create(chains[s.chain], s.value); errors.Is(err, domain.ErrPolicyDenied) != s.refused || (!s.refused && err != nil) {
			t.Fatalf("step %d (chain %d, value %d): %v, want refused %v", i, s.chain, s.value, err, s.refused)
		}
	}
}

// Changes of one scope's policy made at once are numbered one at a time, the first one of a
// scope (no row yet to lock) included: each is stored under its own version, none fails.
func TestConcurrentPolicyChangesOfOneScopeTakeTurns(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	book := newPolicyBook(t, pool)
	for round := range 3 {
		scope := fmt.Sprintf("payouts-%d", round)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = book.Set(t.Context(), "credential", scope, []byte(`{"maxValuePerTx":"100"}`), "ops")
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, change %d: %v", round, i, err)
			}
		}
		var versions int
		if err := pool.QueryRow(t.Context(), "SELECT count(DISTINCT version) FROM spending_policy_version WHERE scope = $1", scope).Scan(&versions); err != nil || versions != 4 {
			t.Fatalf("round %d: %d versions (%v), want 4", round, versions, err)
		}
	}
}

// A batch that began in one minute and waited for its policies' locks past the minute's end
// is counted in the minute it admitted in: its window reads and its spend use the clock after
// the locks, not the transaction's start. Counted in the minute it began, its spend would
// leave a window a minute before the limit allows.
func TestABatchThatWaitedPastAMinutesEndIsCountedInTheMinuteItAdmittedIn(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{LockTimeout: 30 * time.Second})
	book := newPolicyBook(t, pool)
	signer := testsupport.SignerAddress(13)
	if _, err := book.Set(t.Context(), "signer", signer.Hex(), []byte(`{"windows":[{"period":"1h","maxValue":"100"}]}`), "ops"); err != nil {
		t.Fatal(err)
	}
	to := signer
	req := func(id string) domain.CreateRequest {
		return domain.CreateRequest{Signer: signer, RequestID: id, Intent: domain.Intent{To: &to, Value: big.NewInt(1), GasLimit: 21000},
			Admission: domain.Admission{FeeCapPerGas: big.NewInt(1)}}
	}
	if _, created, err := allocateOne(t, node, req("warm"), 21000); !created || err != nil {
		t.Fatalf("the first create: %v %v", created, err)
	}
	// The batch begins a second and a half before a minute ends.
	for now := time.Now(); now.Add(1500 * time.Millisecond).Truncate(time.Minute).Equal(now.Truncate(time.Minute)); now = time.Now() {
		time.Sleep(50 * time.Millisecond)
	}
	hold, err := pool.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hold.Rollback(context.Background()) }()
	if _, err := hold.Exec(t.Context(), `SELECT 1 FROM spending_policy WHERE scope_kind = 'signer' AND scope = $1 FOR UPDATE`, signer.Hex()); err != nil {
		t.Fatal(err)
	}
	op := writer.NewOp(t.Context(), req("waits"), 21000)
	go node.Allocator.AllocateBatch(context.Background(), []*writer.Op{op})
	began := waitForALockWaiter(t, pool)
	for time.Now().Truncate(time.Minute).Equal(began.Truncate(time.Minute)) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if err := hold.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, created, err := op.Wait(t.Context()); !created || err != nil {
		t.Fatalf("the batch that waited: %v %v", created, err)
	}
	var minutes []time.Time
	rows, err := pool.Query(t.Context(), `SELECT minute FROM policy_spend WHERE scope = $1 ORDER BY minute`, signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var m time.Time
		if err := rows.Scan(&m); err != nil {
			t.Fatal(err)
		}
		minutes = append(minutes, m)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	last := minutes[len(minutes)-1]
	if !last.After(began.Truncate(time.Minute)) {
		t.Fatalf("the batch's spend is in the minute %s, the one its transaction began in (%s); want the minute after, when it admitted (buckets %v)",
			last.UTC().Format(time.TimeOnly), began.UTC().Format(time.TimeOnly), minutes)
	}
}

// waitForALockWaiter waits for a backend of pool's database to wait for a row lock and
// answers when its transaction began.
func waitForALockWaiter(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var began time.Time
		err := pool.QueryRow(t.Context(), `SELECT xact_start FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid() LIMIT 1`).Scan(&began)
		if err == nil {
			return began
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	t.Fatal("no batch waited for the policy's lock")
	return time.Time{}
}

// openBatch starts a writer batch of req and answers once it has begun (on the one-statement
// path, and written) but not committed; closing the gate's Release lets it commit.
func openBatch(t *testing.T, node *testsupport.WriterNode, req domain.CreateRequest) (*writer.Op, *testsupport.Gate) {
	t.Helper()
	gate := testsupport.NewGate()
	node.Store.SetGates(nil, gate)
	op := writer.NewOp(t.Context(), req, req.Intent.GasLimit)
	go node.Allocator.AllocateBatch(context.Background(), []*writer.Op{op})
	<-gate.Reached
	return op, gate
}

// A scope's first policy, set while a batch that found none is still open, waits for that
// batch to commit: every create committed after the policy was checked against it. Before,
// the policy had no row for the batch to lock, it committed at once, and the batch's create
// committed after it unchecked and uncounted by its window.
func TestAFirstPolicyWaitsForTheBatchThatFoundNone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, kind, scope string
		// fullPath: the batch numbers from the database and the chain (its signer's first
		// create on this node), not in the one-statement allocation.
		fullPath bool
	}{
		{"signer", "signer", testsupport.SignerAddress(11).Hex(), false},
		{"credential", "credential", "payouts", false},
		{"signer, full path", "signer", testsupport.SignerAddress(11).Hex(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
			book := newPolicyBook(t, pool)
			signer := testsupport.SignerAddress(11)
			create := func(requestID string) domain.CreateRequest {
				to := signer
				return domain.CreateRequest{Signer: signer, RequestID: requestID, Intent: domain.Intent{To: &to, Value: big.NewInt(10), GasLimit: 21000},
					Admission: domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(1)}}
			}
			if !tc.fullPath {
				if _, created, err := allocateOne(t, node, create("warm"), 21000); !created || err != nil {
					t.Fatalf("the first create: %v %v", created, err)
				}
			}
			op, gate := openBatch(t, node, create("open"))

			set := make(chan error, 1)
			go func() {
				_, err := book.Set(context.Background(), tc.kind, tc.scope, []byte(`{"windows":[{"period":"1h","maxValue":"10"}]}`), "ops")
				set <- err
			}()
			waiting := false
			for deadline := time.Now().Add(10 * time.Second); !waiting && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				select {
				case err := <-set:
					close(gate.Release)
					t.Fatalf("the policy was set (%v) while a batch that found none was open, want it to wait for the batch", err)
				default:
				}
				if err := pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
					AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`).Scan(&waiting); err != nil {
					t.Fatal(err)
				}
			}
			close(gate.Release)
			if !waiting {
				t.Fatal("the policy change never waited for the open batch")
			}
			if _, created, err := op.Wait(t.Context()); !created || err != nil {
				t.Fatalf("the open batch's create: %v %v, want admitted (it came before the policy)", created, err)
			}
			if err := <-set; err != nil {
				t.Fatal(err)
			}
			// From the policy's commit on, its window counts: 10 fits, 10 more does not.
			if _, created, err := allocateOne(t, node, create("after-1"), 21000); !created || err != nil {
				t.Fatalf("the first create under the policy: %v %v, want admitted", created, err)
			}
			if _, created, err := allocateOne(t, node, create("after-2"), 21000); created || !errors.Is(err, domain.ErrPolicyDenied) {
				t.Fatalf("the second create under the policy: %v %v, want refused by its window", created, err)
			}
		})
	}
}

// Deleting a policy a scope does not have answers not found at once: only a first policy
// waits for the open batches (and holds new ones back while it does).
func TestDeletingAMissingPolicyDoesNotWaitForBatches(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	book := newPolicyBook(t, pool)
	signer := testsupport.SignerAddress(12)
	to := signer
	req := func(id string) domain.CreateRequest {
		return domain.CreateRequest{Signer: signer, RequestID: id, Intent: domain.Intent{To: &to, Value: big.NewInt(1), GasLimit: 21000}, Admission: domain.Admission{FeeCapPerGas: big.NewInt(1)}}
	}
	if _, created, err := allocateOne(t, node, req("warm"), 21000); !created || err != nil {
		t.Fatalf("the first create: %v %v", created, err)
	}
	op, gate := openBatch(t, node, req("open"))
	_, err := book.Delete(t.Context(), "signer", signer.Hex(), "ops")
	close(gate.Release)
	var notFound *domain.NotFoundError
	if !errors.As(err, &notFound) {
		t.Fatalf("deleting a policy the signer does not have, beside an open batch: %v, want not found", err)
	}
	if _, created, err := op.Wait(t.Context()); !created || err != nil {
		t.Fatalf("the open batch's create: %v %v", created, err)
	}
}
