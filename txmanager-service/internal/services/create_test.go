package services_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// rosterDirectory stands for the signer registry (outside this package): which signers
// hold a key here and which are retired.
type rosterDirectory struct {
	mu      sync.Mutex
	held    map[common.Address]bool
	retired map[common.Address]bool
}

func (d *rosterDirectory) Accepts(signer common.Address) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !d.held[signer]:
		return fmt.Errorf("%w: %s", domain.ErrUnknownSigner, signer.Hex())
	case d.retired[signer]:
		return fmt.Errorf("%w: %s", domain.ErrSignerRetired, signer.Hex())
	}
	return nil
}

func (d *rosterDirectory) Addresses() []common.Address {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []common.Address
	for a := range d.held {
		out = append(out, a)
	}
	return out
}

func (d *rosterDirectory) retire(signer common.Address, retired bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.retired[signer] = retired
}

// createFixture is the create path as a node runs it: the use case over the embedded chain
// (two funded keys), a real database, the node's lease manager, funds guard, signing health
// and writer queue.
type createFixture struct {
	pool      *pgxpool.Pool
	sim       *chain.SimulatedChain
	node      *testsupport.WriterNode
	funded    []common.Address
	unfunded  common.Address
	directory *rosterDirectory
	signing   *services.SigningHealth
	funds     *services.FundsGuard
	queue     *writer.Writer
	txs       *repositories.TxRepository
}

func newCreateFixture(t *testing.T) *createFixture {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	f := &createFixture{pool: pool, sim: sim, node: testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{}),
		unfunded: testsupport.SignerAddress(70), txs: repositories.NewTxRepository(pool, testsupport.TestChain()),
		directory: &rosterDirectory{held: map[common.Address]bool{}, retired: map[common.Address]bool{}}}
	for _, key := range sim.DevKeys() {
		f.funded = append(f.funded, crypto.PubkeyToAddress(key.PublicKey))
	}
	for _, a := range append([]common.Address{f.unfunded}, f.funded...) {
		f.directory.held[a] = true
	}
	f.signing = services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 1000, MaxDuration: time.Nanosecond},
		repositories.NewSigningRepository(pool, testsupport.TestChain()), services.SystemClock{}, testLogger())
	f.funds, err = services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second, Fees: services.FeePolicy{BumpPercent: 12, BaseFeeMultiplier: 2}},
		sim, repositories.NewFundsRepository(pool, testsupport.TestChain()), services.SystemClock{}, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	f.queue, err = writer.New(writer.QueueConfig{Workers: 1, BatchSize: 16, QueueSize: 16}, f.node.Allocator, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	f.queue.Start(context.Background())
	t.Cleanup(func() { f.queue.Stop(context.Background()) })
	return f
}

// useCase is the create use case with cfg over simulator (the embedded chain when nil).
func (f *createFixture) useCase(cfg services.CreateConfig, simulator services.CallSimulator) *services.CreateTxUseCase {
	if simulator == nil {
		simulator = f.sim
	}
	if cfg.Limits.MaxGasLimit == 0 {
		cfg.Limits = domain.DefaultLimits()
	}
	return services.NewCreateTxUseCase(cfg, f.directory, f.txs, simulator, f.node.Leases, f.funds, f.signing, f.queue,
		services.NewStandbyWait(repositories.NewStandbyRepository(f.pool)), services.SystemClock{}, telemetry.Noop(), testLogger())
}

// transfer is a create of value wei from signer to itself.
func transfer(signer common.Address, requestID, value string, gasLimit uint64) domain.CreateInput {
	return domain.CreateInput{Signer: signer.Hex(), RequestID: requestID, To: signer.Hex(), Value: value, GasLimit: gasLimit}
}

// Each step of a create's admission, in the order the steps run, on one node: every step
// builds on what the earlier ones wrote (order-1 is on record from the third step on).
func TestCreateAdmission(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	create := f.useCase(services.CreateConfig{EstimateGas: true, SimulateCalls: true, GasEstimateMultiplier: 1.2}, nil)
	signer, stalled := f.funded[0], f.funded[1]
	peer := testsupport.NewWriterNode(t, f.pool, "node-b", testsupport.WriterNodeOptions{})
	contested := testsupport.SignerAddress(71)
	f.directory.held[contested] = true
	if _, err := peer.Leases.Acquire(t.Context(), contested.Hex()); err != nil {
		t.Fatal(err)
	}

	var first domain.ManagedTx
	steps := []struct {
		name    string
		before  func(t *testing.T)
		in      domain.CreateInput
		wantErr error
		check   func(t *testing.T, res services.CreateResult)
	}{
		{name: "a malformed signer", in: domain.CreateInput{Signer: "0x12", Value: "1", GasLimit: 21000}, wantErr: domain.ErrInvalidArgument},
		{name: "a signer without a key here", in: transfer(testsupport.SignerAddress(72), "", "1", 21000), wantErr: domain.ErrUnknownSigner},
		{name: "a new transfer", in: transfer(signer, "order-1", "1", 21000), check: func(t *testing.T, res services.CreateResult) {
			if !res.Created || res.Tx.Nonce != 0 {
				t.Fatalf("%+v, want created at nonce 0", res)
			}
			first = res.Tx
		}},
		{name: "its retry", in: transfer(signer, "order-1", "1", 21000), check: func(t *testing.T, res services.CreateResult) {
			if res.Created || res.Tx.ID != first.ID {
				t.Fatalf("created %t tx %s, want the replay of %s", res.Created, res.Tx.ID, first.ID)
			}
		}},
		{name: "its request id with another intent", in: transfer(signer, "order-1", "2", 21000), wantErr: domain.ErrIdempotencyConflict},
		{name: "no gas limit: estimated and padded", in: transfer(signer, "order-2", "1", 0), check: func(t *testing.T, res services.CreateResult) {
			if !res.Created || res.Tx.EffectiveGasLimit != 25200 {
				t.Fatalf("created %t gas %d, want created with 21000 x 1.2", res.Created, res.Tx.EffectiveGasLimit)
			}
		}},
		{name: "a call that reverts", in: domain.CreateInput{Signer: signer.Hex(), Value: "0", Data: "0x60006000fd", GasLimit: 100000}, wantErr: domain.ErrIntentReverts},
		{name: "an estimate for a signer who cannot pay", in: transfer(f.unfunded, "", "1", 0), wantErr: domain.ErrInsufficientFunds},
		// The node caps an estimate at the gas a call names, and at what the signer's balance
		// pays at the fee it names: the call then "exceeds its allowance" without reverting.
		{name: "a call whose gas limit is below its need", in: domain.CreateInput{Signer: signer.Hex(), Value: "0", Data: "0x600160005500", GasLimit: 60000},
			wantErr: domain.ErrInvalidArgument},
		{name: "a call the signer cannot pay for at its named fee", in: domain.CreateInput{Signer: f.unfunded.Hex(), To: signer.Hex(), Value: "0", Data: "0x1234",
			MaxFeePerGas: "100000000000", MaxPriorityFeePerGas: "1"}, wantErr: domain.ErrInsufficientFunds},
		{name: "a transfer the signer cannot pay for", in: transfer(f.unfunded, "", "1", 21000), wantErr: domain.ErrInsufficientFunds},
		{name: "a signer another node drives", in: transfer(contested, "", "1", 21000), wantErr: domain.ErrNotLeader},
		{name: "a signer whose key source cannot sign", before: func(t *testing.T) {
			lease, err := f.node.Leases.Acquire(t.Context(), stalled.Hex())
			if err != nil {
				t.Fatal(err)
			}
			f.signing.Failed(t.Context(), lease, errors.New("kms: key disabled"))
			// Nothing waits for a signature: one create is let through to try the key
			// (the signature that could end the failure). That one has gone.
			if err := f.signing.Admit(lease); err != nil {
				t.Fatalf("the create that tries the key: %v, want it admitted", err)
			}
		}, in: transfer(stalled, "", "1", 21000), wantErr: domain.ErrSignerUnavailable},
		{name: "a retired signer's new create", before: func(*testing.T) { f.directory.retire(signer, true) }, in: transfer(signer, "order-3", "1", 21000),
			wantErr: domain.ErrSignerRetired},
		{name: "a retired signer's acknowledged create, retried", in: transfer(signer, "order-1", "1", 21000), check: func(t *testing.T, res services.CreateResult) {
			if res.Created || res.Tx.ID != first.ID {
				t.Fatalf("created %t tx %s, want the replay of %s", res.Created, res.Tx.ID, first.ID)
			}
		}},
	}
	for _, s := range steps {
		if s.before != nil {
			s.before(t)
		}
		res, err := create.Create(t.Context(), s.in)
		switch {
		case s.wantErr != nil && !errors.Is(err, s.wantErr):
			t.Fatalf("%s: %+v, %v; want %v", s.name, res, err, s.wantErr)
		case s.wantErr == nil && err != nil:
			t.Fatalf("%s: %v", s.name, err)
		case s.check != nil:
			s.check(t, res)
		}
	}
	// Nothing refused took a nonce: the signer's rows are order-1 and order-2 only.
	testsupport.AssertSignerRows(t, f.pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}}, 2)
}

// A create that cannot go on now (no chain endpoint answers, estimation turned off) is
// refused without a nonce, but a retry of an acknowledged create is still answered with
// its transaction, before the chain is asked when the create would ask it first.
func TestCreateRefusalsStillAnswerRetries(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	signer := f.funded[0]
	acknowledged, err := f.useCase(services.CreateConfig{EstimateGas: true}, nil).Create(t.Context(), transfer(signer, "order-1", "1", 21000))
	if err != nil {
		t.Fatal(err)
	}
	// A call is simulated before it is written: its retry is looked up before the chain is
	// asked.
	call := domain.CreateInput{Signer: signer.Hex(), RequestID: "call-1", To: signer.Hex(), Value: "0", Data: "0x1234", GasLimit: 30000}
	simulated, err := f.useCase(services.CreateConfig{EstimateGas: true, SimulateCalls: true}, nil).Create(t.Context(), call)
	if err != nil {
		t.Fatal(err)
	}
	held, err := chain.NewMultiChain([]chain.Endpoint{{Name: "embedded", Chain: f.sim.RPCChain}}, chain.MultiChainConfig{ReadTimeout: time.Second}, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(held.Close)
	held.HoldUntilVerified(chain.SimulatedChainID)

	tests := []struct {
		name     string
		cfg      services.CreateConfig
		chain    services.CallSimulator
		in       domain.CreateInput
		wantErr  error
		wantTxID string // a replay's transaction
	}{
		{"no chain endpoint answers", services.CreateConfig{EstimateGas: true}, held, transfer(signer, "order-2", "1", 21000), domain.ErrUnavailable, ""},
		{"no chain endpoint answers, a retry", services.CreateConfig{EstimateGas: true}, held, transfer(signer, "order-1", "1", 21000), nil, acknowledged.Tx.ID.String()},
		{"a retry of a call, simulated first", services.CreateConfig{EstimateGas: true, SimulateCalls: true}, held, call, nil, simulated.Tx.ID.String()},
		{"no gas limit with estimation off", services.CreateConfig{}, nil, transfer(signer, "order-3", "1", 0), domain.ErrInvalidArgument, ""},
	}
	for _, tc := range tests {
		res, err := f.useCase(tc.cfg, tc.chain).Create(t.Context(), tc.in)
		switch {
		case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
			t.Errorf("%s: %v, want %v", tc.name, err, tc.wantErr)
		case tc.wantErr == nil && (err != nil || res.Created || res.Tx.ID.String() != tc.wantTxID):
			t.Errorf("%s: created %t tx %s (%v), want the replay of %s", tc.name, res.Created, res.Tx.ID, err, tc.wantTxID)
		}
	}
	testsupport.AssertSignerRows(t, f.pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}}, 2)
}

// Reading a transaction: by id, or by signer and request id, each validated first.
func TestGetTx(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	signer := f.funded[0]
	created, err := f.useCase(services.CreateConfig{}, nil).Create(t.Context(), transfer(signer, "order-1", "1", 21000))
	if err != nil {
		t.Fatal(err)
	}
	get := services.NewGetTxUseCase(f.txs)
	byID := []struct {
		name, id string
		wantErr  error
	}{
		{"its id", created.Tx.ID.String(), nil},
		{"not a UUID", "tx-1", domain.ErrInvalidArgument},
		{"a UUID nobody created", "00000000-0000-0000-0000-000000000001", domain.ErrNotFound},
	}
	for _, tc := range byID {
		tx, err := get.ByID(t.Context(), tc.id)
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && tx.ID != created.Tx.ID) {
			t.Errorf("by id, %s: %s %v, want %v", tc.name, tx.ID, err, tc.wantErr)
		}
	}
	byRequest := []struct {
		name, signer, requestID string
		wantErr                 error
	}{
		{"its request id", signer.Hex(), "order-1", nil},
		{"a malformed signer", "0x1", "order-1", domain.ErrInvalidArgument},
		{"no request id", signer.Hex(), "", domain.ErrInvalidArgument},
		{"a request id with a space", signer.Hex(), "order 1", domain.ErrInvalidArgument},
		{"a request id nobody used", signer.Hex(), "order-9", domain.ErrNotFound},
	}
	for _, tc := range byRequest {
		tx, err := get.ByRequestID(t.Context(), tc.signer, tc.requestID)
		if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && tx.ID != created.Tx.ID) {
			t.Errorf("by request id, %s: %s %v, want %v", tc.name, tx.ID, err, tc.wantErr)
		}
	}
}

// After a database loss a lost request's retry meets a chain its intent already ran on: a
// transfer of the balance finds it spent, a call that ran reverts now. Refused there, it
// still adopts the recovered transaction waiting for it, as a retry that passes its checks
// does; with nothing left to adopt, the refusal stands and no nonce is taken.
func TestALostRequestsRetryIsAdoptedWhereItsChecksRefuseIt(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	create := f.useCase(services.CreateConfig{EstimateGas: true, SimulateCalls: true}, nil)
	signer := f.unfunded
	lease, err := f.node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	lost := transfer(signer, "lost-1", "5", 21000)
	parsed, err := domain.ParseCreateRequest(lost, domain.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	key := parsed.RecoveryKey()
	recovered := uuid.New()
	// Recovery recorded the transaction it found on chain at nonce 0, adoptable for an hour,
	// and moved the signer's cursor past it.
	for _, stmt := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token, recovered_at, recovery_key, unclaimed_until)
			VALUES (1337, $1, $2, '\x00', 0, $3, 'TRACKING', 'SIGNED', '0x01', $4, now(), $5, now() + interval '1 hour')`,
			[]any{recovered, signer.Hex(), fmt.Sprintf(`{"to":%q,"value":"5","gasLimit":21000,"effectiveGasLimit":21000}`, signer.Hex()), int64(lease.Token), key[:]}},
		{`INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, 1, $2)
			ON CONFLICT (chain_id, signer) DO UPDATE SET next_nonce = 1`, []any{signer.Hex(), int64(lease.Token)}},
	} {
		if _, err := f.pool.Exec(t.Context(), stmt.sql, stmt.args...); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name    string
		in      domain.CreateInput
		wantErr error
		wantTx  uuid.UUID
	}{
		{name: "the lost request's retry, which the funds check refuses", in: lost, wantTx: recovered},
		{name: "its replay", in: lost, wantTx: recovered},
		{name: "the same intent under another request: nothing left to adopt", in: transfer(signer, "new-1", "5", 21000), wantErr: domain.ErrInsufficientFunds},
	}
	for _, s := range steps {
		res, err := create.Create(t.Context(), s.in)
		if (s.wantErr != nil && !errors.Is(err, s.wantErr)) || (s.wantErr == nil && (err != nil || res.Tx.ID != s.wantTx || res.Created)) {
			t.Fatalf("%s: %+v, %v; want tx %s, error %v", s.name, res.Tx, err, s.wantTx, s.wantErr)
		}
	}
	testsupport.AssertSignerRows(t, f.pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: int64(lease.Token)}}, 1)
}

// A create whose caller stops waiting while its writer batch commits is answered
// OUTCOME_UNKNOWN, not "unavailable, try again": the writer still writes it, and a create
// without a request id sent again would be made twice.
func TestACreateWhoseTimeRunsOutInTheWriterHasAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	create := f.useCase(services.CreateConfig{EstimateGas: true, GasEstimateMultiplier: 1.2}, nil)
	signer := f.funded[0]
	gate := testsupport.NewGate()
	f.node.Store.SetGates(gate, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := create.Create(ctx, transfer(signer, "", "1", 21000))
		done <- err
	}()
	<-gate.Reached
	err := <-done
	close(gate.Release)
	if !errors.Is(err, domain.ErrOutcomeUnknown) {
		t.Fatalf("a create whose deadline ended in the writer: %v, want an unknown outcome", err)
	}
	var rows int
	for deadline := time.Now().Add(5 * time.Second); rows == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM managed_tx WHERE signer = $1`, signer.Hex()).Scan(&rows); err != nil {
			t.Fatal(err)
		}
	}
	if rows != 1 {
		t.Fatalf("%d transactions written after the caller left, want the one its batch held", rows)
	}
}

// An intent without a gas limit whose estimate is above create.maxGasLimit is refused on
// gasLimit, before it takes a nonce: cut to the bound it would run out of gas for certain.
// One within the bound is padded up to it at most.
func TestAnEstimateAboveTheGasBoundIsRefused(t *testing.T) {
	t.Parallel()
	f := newCreateFixture(t)
	limits := domain.DefaultLimits()
	limits.MaxGasLimit = 30000
	create := f.useCase(services.CreateConfig{EstimateGas: true, GasEstimateMultiplier: 1.5, Limits: limits}, nil)
	signer := f.funded[0]
	tests := []struct {
		name    string
		in      domain.CreateInput
		wantErr error
		wantGas uint64
	}{
		{name: "a store that needs about 43,000 gas", in: domain.CreateInput{Signer: signer.Hex(), Value: "0", Data: "0x600160005500"}, wantErr: domain.ErrInvalidArgument},
		{name: "a transfer, padded to the bound", in: transfer(signer, "", "1", 0), wantGas: 30000},
	}
	for _, tt := range tests {
		res, err := create.Create(t.Context(), tt.in)
		switch {
		case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
			t.Fatalf("%s: %+v, %v; want %v", tt.name, res.Tx, err, tt.wantErr)
		case tt.wantErr == nil && (err != nil || res.Tx.EffectiveGasLimit != tt.wantGas):
			t.Fatalf("%s: gas %d, %v; want created with %d", tt.name, res.Tx.EffectiveGasLimit, err, tt.wantGas)
		}
	}
	testsupport.AssertSignerRows(t, f.pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}}, 1)
}
