package services_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"

	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// fakeKeys stands for the signer registry: which signers hold a key and in what state.
type fakeKeys struct {
	mu       sync.Mutex
	held     map[common.Address]bool
	states   map[common.Address]domain.RosterState
	paused   map[common.Address]bool
	builds   int
	buildErr error
	noSource bool
}

func newFakeKeys(held ...common.Address) *fakeKeys {
	k := &fakeKeys{held: map[common.Address]bool{}, states: map[common.Address]domain.RosterState{}, paused: map[common.Address]bool{}}
	for _, a := range held {
		k.held[a] = true
	}
	return k
}

func (k *fakeKeys) Check(domain.RosterSigner) error {
	if k.noSource {
		return errors.New("signers.keystore.dir is empty")
	}
	return nil
}

func (k *fakeKeys) Build(_ context.Context, e domain.RosterSigner) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.builds++
	if k.buildErr != nil {
		return k.buildErr
	}
	k.held[e.Signer] = true
	return nil
}

func (k *fakeKeys) State(signer common.Address) (domain.RosterState, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.states[signer]
	if !ok {
		s = domain.RosterActive
	}
	return s, k.held[signer]
}

func (k *fakeKeys) Apply(e domain.RosterSigner) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.states[e.Signer] = e.State
	k.paused[e.Signer] = e.PausedAt != nil
	if e.State == domain.RosterRetired {
		delete(k.held, e.Signer)
	}
}

func newTestRoster(t *testing.T, pool *pgxpool.Pool, keys services.SignerKeys, leases ...*services.LeaseManager) *services.SignerRoster {
	t.Helper()
	logger := log.NewStdLogger(os.Stderr)
	if !testing.Verbose() {
		logger = log.NewFilter(logger, log.FilterLevel(log.LevelError))
	}
	return services.NewSignerRoster(services.RosterConfig{Node: "roster-test", PollInterval: time.Second, BuildTimeout: 5 * time.Second},
		repositories.NewRosterRepository(pool), keys, leases, testsupport.TxManager(t, pool), testsupport.AuditTrail(t, pool, "roster-test"), logger)
}

// A retirement waits for a writer batch that holds the signer (its transactions commit
// before the retirement is recorded), and every batch after it allocates nothing: no
// create is accepted after the retirement is recorded.
func TestRetirementWaitsForTheBatchInFlightAndRefusesTheNext(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(27)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	keys := newFakeKeys(signer)
	roster := newTestRoster(t, pool, keys, node.Leases)
	if err := repositories.NewRosterRepository(pool).RegisterConfigSigners(t.Context(), "node-a", []common.Address{signer}); err != nil {
		t.Fatal(err)
	}
	if _, errs := testsupport.Results(t, node.Allocate(t, signer, 2)); errors.Join(errs...) != nil {
		t.Fatalf("first batch: %v", errors.Join(errs...))
	}

	gate := testsupport.NewGate()
	node.Store.SetGates(nil, gate)
	inFlight := make(chan []*writer.Op, 1)
	go func() { inFlight <- node.Allocate(t, signer, 3) }()
	<-gate.Reached // the batch holds the roster row FOR KEY SHARE in its open transaction

	retired := make(chan error, 1)
	go func() {
		_, err := roster.RetireSigner(context.Background(), signer.Hex(), "rotation", "operator")
		retired <- err
	}()
	select {
	case err := <-retired:
		t.Fatalf("the retirement was recorded while a batch held the signer (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(gate.Release)
	if _, errs := testsupport.Results(t, <-inFlight); errors.Join(errs...) != nil {
		t.Fatalf("the batch in flight was refused: %v; it held the signer before the retirement", errors.Join(errs...))
	}
	if err := <-retired; err != nil {
		t.Fatal(err)
	}
	if state, _ := keys.State(signer); state != domain.RosterRetiring {
		t.Fatalf("the node applies %q to the signer, want retiring", state)
	}

	_, errs := testsupport.Results(t, node.Allocate(t, signer, 2))
	for i, err := range errs {
		if !errors.Is(err, domain.ErrSignerRetired) {
			t.Fatalf("create %d after the retirement: %v, want ErrSignerRetired", i, err)
		}
	}
	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 1}, {Nonce: 4, Token: 1}}, 5)
}

// rosterWithTwoCreates starts a node that has joined the roster with the testsupport.SignerAddress(i)
// key and allocated two transactions for it.
func rosterWithTwoCreates(t *testing.T, i int) (*pgxpool.Pool, common.Address, *testsupport.WriterNode, *fakeKeys, *services.SignerRoster) {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(i)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	keys := newFakeKeys(signer)
	roster := newTestRoster(t, pool, keys, node.Leases)
	if err := roster.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, errs := testsupport.Results(t, node.Allocate(t, signer, 2)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	return pool, signer, node, keys, roster
}

// confirmAll makes every transaction of signer final, as the pipeline would.
func confirmAll(t *testing.T, pool *pgxpool.Pool, signer common.Address) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), "UPDATE managed_tx SET state = 'CONFIRMED', confirmed_at = now() WHERE signer = $1", signer.Hex()); err != nil {
		t.Fatal(err)
	}
}

// A retiring signer is retired once no transaction of it is unfinished; then its lease
// goes and its key is dropped.
func TestRetirementCompletesWhenNothingIsUnfinished(t *testing.T) {
	t.Parallel()
	pool, signer, node, keys, roster := rosterWithTwoCreates(t, 28)
	entry, err := roster.RetireSigner(t.Context(), signer.Hex(), "", "operator")
	if err != nil {
		t.Fatal(err)
	}
	if entry.State != domain.RosterRetiring || entry.Unfinished != 2 {
		t.Fatalf("retire answered %s with %d unfinished, want retiring with 2", entry.State, entry.Unfinished)
	}
	if err := roster.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if state, _ := keys.State(signer); state != domain.RosterRetiring {
		t.Fatalf("with transactions unfinished the signer must stay retiring, not %s", state)
	}
	if _, held := node.Leases.Current(signer.Hex()); !held {
		t.Fatal("with transactions unfinished the signer's lease must stay")
	}

	confirmAll(t, pool, signer)
	if err := roster.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if state, held := keys.State(signer); held || state != domain.RosterRetired {
		t.Fatalf("after its last transaction was final: state %s, key held %t; want retired, key dropped", state, held)
	}
	if _, held := node.Leases.Current(signer.Hex()); held {
		t.Fatal("the retired signer's lease is still held")
	}
	var live bool
	if err := pool.QueryRow(t.Context(), "SELECT expires_at > now() FROM signer_lease WHERE signer = $1", signer.Hex()).Scan(&live); err != nil || live {
		t.Fatalf("the retired signer's lease is live in the database (err %v)", err)
	}
	again, err := roster.RetireSigner(t.Context(), signer.Hex(), "", "operator")
	if err != nil || again.State != domain.RosterRetired {
		t.Fatalf("retiring a retired signer again: %v %s, want it answered as retired", err, again.State)
	}
}

// A create that passed the node's roster check as the signer's retirement completed finds
// the lease let go when its batch checks it: it is refused as retired, the answer a create a
// moment later gets, not FENCED, which would only invite a retry that is refused too.
func TestACreateRacingTheEndOfARetirementIsRefusedAsRetired(t *testing.T) {
	t.Parallel()
	pool, signer, node, _, roster := rosterWithTwoCreates(t, 29)
	confirmAll(t, pool, signer)

	gate := testsupport.NewGate()
	node.Store.SetGates(gate, nil)
	inFlight := make(chan []*writer.Op, 1)
	go func() { inFlight <- node.Allocate(t, signer, 2) }()
	<-gate.Reached // the batch has the lease in hand and has not checked it yet

	// Nothing is unfinished, so the retirement completes at once and lets the lease go.
	entry, err := roster.RetireSigner(t.Context(), signer.Hex(), "rotation", "operator")
	if err != nil || entry.State != domain.RosterRetired {
		t.Fatalf("retire: %v, state %s; want retired", err, entry.State)
	}
	if _, held := node.Leases.Current(signer.Hex()); held {
		t.Fatal("the retired signer's lease is still held")
	}
	close(gate.Release)
	_, errs := testsupport.Results(t, <-inFlight)
	for i, err := range errs {
		if !errors.Is(err, domain.ErrSignerRetired) {
			t.Errorf("create %d of the batch in flight: %v, want ErrSignerRetired", i, err)
		}
	}
	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}}, 2)
}

func TestAddSigner(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	added := testsupport.SignerAddress(40)
	tests := []struct {
		name      string
		prepare   func(t *testing.T, roster *services.SignerRoster, keys *fakeKeys)
		signer    string
		source    string
		keyRef    string
		wantErr   error
		wantField string
		wantState domain.RosterState
	}{
		{name: "new keystore signer", signer: added.Hex(), source: "keystore", wantState: domain.RosterActive},
		{name: "the same again", signer: added.Hex(), source: "keystore", wantState: domain.RosterActive},
		{name: "active with another source", signer: added.Hex(), source: "awsKms", keyRef: "alias/other", wantErr: domain.ErrSignerActive},
		{name: "unknown source", signer: testsupport.SignerAddress(41).Hex(), source: "vault", wantField: "source"},
		{name: "kms without a key id", signer: testsupport.SignerAddress(41).Hex(), source: "gcpKms", wantField: "keyRef"},
		{name: "bad address", signer: "0x12", source: "keystore", wantField: "signer"},
		{name: "source not configured on this node", signer: testsupport.SignerAddress(42).Hex(), source: "keystore", wantField: "source",
			prepare: func(_ *testing.T, _ *services.SignerRoster, keys *fakeKeys) { keys.noSource = true }},
		{name: "key cannot be read", signer: testsupport.SignerAddress(43).Hex(), source: "awsKms", keyRef: "alias/missing", wantField: "keyRef",
			prepare: func(_ *testing.T, _ *services.SignerRoster, keys *fakeKeys) {
				keys.buildErr = errors.New("NotFoundException")
			}},
		{name: "a key source that does not answer for now", signer: testsupport.SignerAddress(45).Hex(), source: "awsKms", keyRef: "alias/throttled", wantErr: domain.ErrUnavailable,
			prepare: func(_ *testing.T, _ *services.SignerRoster, keys *fakeKeys) {
				keys.buildErr = fmt.Errorf("signer: %w: ThrottlingException", domain.ErrKeySourceUnreachable)
			}},
		{name: "a retiring signer with another key source", signer: testsupport.SignerAddress(46).Hex(), source: "awsKms", keyRef: "alias/new", wantErr: domain.ErrSignerActive,
			prepare: func(t *testing.T, roster *services.SignerRoster, _ *fakeKeys) {
				if _, err := roster.AddSigner(t.Context(), testsupport.SignerAddress(46).Hex(), "keystore", "", "", "op"); err != nil {
					t.Fatal(err)
				}
				// Retiring: unfinished transactions keep it from retired.
				if _, err := pool.Exec(t.Context(), "UPDATE signer_roster SET state = 'retiring' WHERE signer = $1", testsupport.SignerAddress(46).Hex()); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a retired signer made active again", signer: testsupport.SignerAddress(44).Hex(), source: "keystore", wantState: domain.RosterActive,
			prepare: func(t *testing.T, roster *services.SignerRoster, _ *fakeKeys) {
				if _, err := roster.AddSigner(t.Context(), testsupport.SignerAddress(44).Hex(), "keystore", "", "", "op"); err != nil {
					t.Fatal(err)
				}
				if _, err := roster.RetireSigner(t.Context(), testsupport.SignerAddress(44).Hex(), "", "op"); err != nil {
					t.Fatal(err)
				}
			}},
	}
	keys := newFakeKeys()
	roster := newTestRoster(t, pool, keys)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys.noSource, keys.buildErr = false, nil
			if tt.prepare != nil {
				tt.prepare(t, roster, keys)
			}
			entry, err := roster.AddSigner(t.Context(), tt.signer, tt.source, tt.keyRef, "note", "operator")
			var validation *domain.ValidationError
			switch {
			case tt.wantField != "":
				if !errors.As(err, &validation) || validation.Field != tt.wantField {
					t.Fatalf("error %v, want a validation error on %s", err, tt.wantField)
				}
				if _, err := repositories.NewRosterRepository(pool).GetRosterSigner(t.Context(), common.HexToAddress(tt.signer)); !errors.Is(err, domain.ErrNotFound) && common.IsHexAddress(tt.signer) && tt.prepare == nil {
					t.Fatalf("a refused signer was recorded (%v)", err)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
			case err != nil:
				t.Fatal(err)
			case entry.State != tt.wantState || entry.Signer != common.HexToAddress(tt.signer):
				t.Fatalf("added %s in state %s, want %s", entry.Signer.Hex(), entry.State, tt.wantState)
			default:
				if state, held := keys.State(entry.Signer); !held || state != domain.RosterActive {
					t.Fatalf("the node does not serve the added signer (held %t, state %s)", held, state)
				}
			}
		})
	}
	// The new signer once (not again when added twice), the unreadable and the unanswering
	// keys' tries, the retiring signer's first key, and the signer retired (its key dropped: nothing was unfinished) and made
	// active again twice.
	if keys.builds != 6 {
		t.Fatalf("%d key sources built, want 6", keys.builds)
	}
}

// Another node learns of an added signer at its next poll and builds its key; a key it
// cannot build is retried at each poll, not given up.
func TestSyncBuildsSignersAddedElsewhere(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(50)
	first := newTestRoster(t, pool, newFakeKeys())
	if _, err := first.AddSigner(t.Context(), signer.Hex(), "gcpKms", "projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1", "", "op"); err != nil {
		t.Fatal(err)
	}
	otherKeys := newFakeKeys()
	otherKeys.buildErr = errors.New("PermissionDenied")
	other := newTestRoster(t, pool, otherKeys)
	if err := other.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, held := otherKeys.State(signer); held {
		t.Fatal("a key that could not be built is held")
	}
	otherKeys.buildErr = nil
	if err := other.Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, held := otherKeys.State(signer); !held || otherKeys.builds != 2 {
		t.Fatalf("after the key became readable: held %t after %d builds, want held after 2", held, otherKeys.builds)
	}
}

// A key source that keeps failing to build is tried less often: at each poll for the first
// few, then after a wait that doubles (a wrong keystore passphrase costs a key derivation
// each try, under the lock the admin calls wait for).
func TestAKeyThatKeepsFailingIsTriedLessOften(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(51)
	if _, err := newTestRoster(t, pool, newFakeKeys()).AddSigner(t.Context(), signer.Hex(), "keystore", "", "", "op"); err != nil {
		t.Fatal(err)
	}
	keys := newFakeKeys()
	keys.buildErr = errors.New("could not decrypt key with given password")
	other := newTestRoster(t, pool, keys)
	for range 10 {
		if err := other.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if keys.builds != 3 {
		t.Fatalf("%d builds in 10 polls at once, want 3 (then a wait)", keys.builds)
	}
}

// unreachableKeys stands for key sources that do not answer: a build of one of its KMS
// signers waits until as many KMS builds as the roster runs at once are under way (or its
// deadline passes), then fails as unreachable; a keystore build takes a moment of its own.
// It records how many of each were under way at once.
type unreachableKeys struct {
	*fakeKeys
	kms, keystores map[common.Address]bool
	atOnce         int
	allUnderWay    chan struct{}

	mu                        sync.Mutex
	kmsNow, keystoreNow       int
	kmsPeak, keystorePeak     int
	kmsBuilds, keystoreBuilds int
	released                  bool
}

func (k *unreachableKeys) Build(ctx context.Context, e domain.RosterSigner) error {
	switch {
	case k.kms[e.Signer]:
		k.mu.Lock()
		k.kmsBuilds++
		k.kmsNow++
		k.kmsPeak = max(k.kmsPeak, k.kmsNow)
		if k.kmsNow == k.atOnce && !k.released {
			k.released = true
			close(k.allUnderWay)
		}
		k.mu.Unlock()
		select {
		case <-k.allUnderWay:
		case <-ctx.Done():
		}
		k.mu.Lock()
		k.kmsNow--
		k.mu.Unlock()
		return fmt.Errorf("kms: %w", context.DeadlineExceeded)
	case k.keystores[e.Signer]:
		k.mu.Lock()
		k.keystoreBuilds++
		k.keystoreNow++
		k.keystorePeak = max(k.keystorePeak, k.keystoreNow)
		k.mu.Unlock()
		time.Sleep(20 * time.Millisecond) // room for another decryption to overlap, if one could
		k.mu.Lock()
		k.keystoreNow--
		k.mu.Unlock()
	}
	return k.fakeKeys.Build(ctx, e)
}

// A poll builds the key sources it needs side by side, a bounded number at a time: a
// node with many KMS signers behind an outage is not held for one build timeout per
// signer. Keystore files are still decrypted one at a time.
func TestSyncBuildsKeySourcesSideBySide(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	const kmsSigners, keystoreSigners, atOnce = 11, 3, 8
	keys := &unreachableKeys{fakeKeys: newFakeKeys(), kms: map[common.Address]bool{}, keystores: map[common.Address]bool{},
		atOnce: atOnce, allUnderWay: make(chan struct{})}
	adder := newTestRoster(t, pool, newFakeKeys())
	for i := range kmsSigners {
		signer := testsupport.SignerAddress(200 + i)
		keys.kms[signer] = true
		if _, err := adder.AddSigner(t.Context(), signer.Hex(), "awsKms", fmt.Sprintf("alias/side-by-side-%d", i), "", "op"); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keystoreSigners {
		signer := testsupport.SignerAddress(220 + i)
		keys.keystores[signer] = true
		if _, err := adder.AddSigner(t.Context(), signer.Hex(), "keystore", "", "", "op"); err != nil {
			t.Fatal(err)
		}
	}
	if err := newTestRoster(t, pool, keys).Sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	keys.mu.Lock()
	defer keys.mu.Unlock()
	if keys.kmsBuilds != kmsSigners || keys.keystoreBuilds != keystoreSigners {
		t.Fatalf("%d KMS and %d keystore builds, want %d and %d", keys.kmsBuilds, keys.keystoreBuilds, kmsSigners, keystoreSigners)
	}
	if keys.kmsPeak != atOnce {
		t.Fatalf("at most %d KMS builds under way at once, want %d", keys.kmsPeak, atOnce)
	}
	if keys.keystorePeak != 1 {
		t.Fatalf("%d keystore decryptions at once, want 1", keys.keystorePeak)
	}
	for signer := range keys.kms {
		if _, held := keys.State(signer); held {
			t.Fatalf("KMS signer %s held after its build failed", signer.Hex())
		}
	}
	for signer := range keys.keystores {
		if _, held := keys.State(signer); !held {
			t.Fatalf("keystore signer %s not held after its build", signer.Hex())
		}
	}
}

// A poll spends at most its build budget building: key sources that do not answer hold the
// roster's lock (which the admin calls wait for) no longer than that, whatever their build
// timeout. The builds it could not start or cut short are left to the next poll, not
// counted as failures.
func TestAPollBuildsWithinItsBudget(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	const kmsSigners = 11
	adder := newTestRoster(t, pool, newFakeKeys())
	keys := &unreachableKeys{fakeKeys: newFakeKeys(), kms: map[common.Address]bool{}, keystores: map[common.Address]bool{},
		atOnce: kmsSigners + 1, allUnderWay: make(chan struct{})} // never all under way: each waits for its deadline
	for i := range kmsSigners {
		signer := testsupport.SignerAddress(230 + i)
		keys.kms[signer] = true
		if _, err := adder.AddSigner(t.Context(), signer.Hex(), "gcpKms", fmt.Sprintf("projects/p/locations/l/keyRings/r/cryptoKeys/budget-%d/cryptoKeyVersions/1", i), "", "op"); err != nil {
			t.Fatal(err)
		}
	}
	roster := services.NewSignerRoster(services.RosterConfig{Node: "roster-budget", PollInterval: time.Hour, BuildTimeout: time.Hour, BuildBudget: 2 * time.Second},
		repositories.NewRosterRepository(pool), keys, nil, testsupport.TxManager(t, pool), testsupport.AuditTrail(t, pool, "roster-budget"),
		log.NewFilter(log.NewStdLogger(os.Stderr), log.FilterLevel(log.LevelFatal)))
	kmsBuilds := func() int {
		keys.mu.Lock()
		defer keys.mu.Unlock()
		return keys.kmsBuilds
	}
	// 8 builds at once wait out each poll's budget; the other 3 never start. Had the builds
	// the budget left unstarted or cut short counted as failures, a signer would wait an
	// hour (the poll interval doubled) after 3 of them: with at most 3 failures for each of
	// the 11 signers, 5 polls could not each try 8.
	for poll := 1; poll <= 5; poll++ {
		before := kmsBuilds()
		if err := roster.Sync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if built := kmsBuilds() - before; built != 8 {
			t.Fatalf("poll %d tried %d KMS builds, want 8: the builds the budget left unstarted or cut short counted as failures", poll, built)
		}
	}
}

// slowKeys builds one signer only once the test lets it, and every other at once.
type slowKeys struct {
	*fakeKeys
	slow    common.Address
	started chan struct{}
	release chan struct{}
}

func (k *slowKeys) Build(ctx context.Context, e domain.RosterSigner) error {
	if e.Signer == k.slow {
		close(k.started)
		select {
		case <-k.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return k.fakeKeys.Build(ctx, e)
}

// A key a poll builds takes its roster state (paused here) as soon as it is built, not
// once the poll's slowest build is done: until then it would serve as an active signer on
// this node.
func TestABuiltKeyTakesItsStateAtOnce(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	paused, slow := testsupport.SignerAddress(250), testsupport.SignerAddress(251)
	adder := newTestRoster(t, pool, newFakeKeys())
	for _, signer := range []common.Address{paused, slow} {
		if _, err := adder.AddSigner(t.Context(), signer.Hex(), "awsKms", "alias/at-once-"+signer.Hex(), "", "op"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := adder.Pause(t.Context(), paused.Hex(), "incident", "op"); err != nil {
		t.Fatal(err)
	}
	keys := &slowKeys{fakeKeys: newFakeKeys(), slow: slow, started: make(chan struct{}), release: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- newTestRoster(t, pool, keys).Sync(t.Context()) }()
	select {
	case <-keys.started:
	case err := <-done:
		t.Fatalf("the poll ended before building the slow key: %v", err)
	}
	state := func() (held, isPaused bool) {
		keys.mu.Lock()
		defer keys.mu.Unlock()
		return keys.held[paused], keys.paused[paused]
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if held, isPaused := state(); held && isPaused {
			break
		}
	}
	held, isPaused := state()
	close(keys.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !held || !isPaused {
		t.Fatalf("while another key was still building: the paused signer held %t, paused %t; want held and paused", held, isPaused)
	}
}

// heldListing is the roster's store, except that a listing, once read, waits until the test
// lets it return.
type heldListing struct {
	services.RosterStore
	read, release chan struct{}
}

func (s *heldListing) ListRoster(ctx context.Context) ([]domain.RosterSigner, error) {
	entries, err := s.RosterStore.ListRoster(ctx)
	close(s.read)
	<-s.release
	return entries, err
}

// A pause recorded while a poll holds a roster read from before it is not overwritten by
// that poll: the signer ends the two paused on this node, not active until the next poll.
func TestAPollDoesNotUndoAPauseRecordedAfterItsRead(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(260)
	keys := newFakeKeys(signer)
	store := &heldListing{RosterStore: repositories.NewRosterRepository(pool), read: make(chan struct{}), release: make(chan struct{})}
	roster := services.NewSignerRoster(services.RosterConfig{Node: "roster-stale", PollInterval: time.Second, BuildTimeout: 5 * time.Second},
		store, keys, nil, testsupport.TxManager(t, pool), testsupport.AuditTrail(t, pool, "roster-stale"), log.NewFilter(log.NewStdLogger(os.Stderr), log.FilterLevel(log.LevelError)))
	if _, err := newTestRoster(t, pool, newFakeKeys()).AddSigner(t.Context(), signer.Hex(), "awsKms", "alias/stale-read", "", "op"); err != nil {
		t.Fatal(err)
	}
	synced := make(chan error, 1)
	go func() { synced <- roster.Sync(t.Context()) }()
	<-store.read // the poll has read the signer active
	paused := make(chan error, 1)
	go func() {
		_, err := roster.Pause(t.Context(), signer.Hex(), "incident", "op")
		paused <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		row, err := store.GetRosterSigner(t.Context(), signer)
		if err == nil && row.PausedAt != nil {
			break // the pause is recorded
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pause was not recorded: %+v, %v", row, err)
		}
	}
	close(store.release)
	if err := <-synced; err != nil {
		t.Fatal(err)
	}
	if err := <-paused; err != nil {
		t.Fatal(err)
	}
	keys.mu.Lock()
	defer keys.mu.Unlock()
	if !keys.paused[signer] {
		t.Fatal("the signer is active on this node after its pause was answered: the poll's earlier read overwrote it")
	}
}

// A poll whose deadline is nearer than its build budget (it waited for the roster's lock
// behind an admin call's build) stops building in time to apply the states after it: a
// retiring signer whose last transaction is final is retired by that poll, while a key
// source that does not answer is left to the next.
func TestAPollWithLittleTimeLeftStillAppliesTheStates(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer, unreachable := testsupport.SignerAddress(250), testsupport.SignerAddress(251)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	keys := &unreachableKeys{fakeKeys: newFakeKeys(signer), kms: map[common.Address]bool{unreachable: true}, keystores: map[common.Address]bool{},
		atOnce: 2, allUnderWay: make(chan struct{})} // never all under way: the build waits for its deadline
	roster := services.NewSignerRoster(services.RosterConfig{Node: "roster-late", PollInterval: time.Hour, BuildTimeout: time.Hour, BuildBudget: time.Hour},
		repositories.NewRosterRepository(pool), keys, []*services.LeaseManager{node.Leases}, testsupport.TxManager(t, pool), testsupport.AuditTrail(t, pool, "roster-late"),
		log.NewFilter(log.NewStdLogger(os.Stderr), log.FilterLevel(log.LevelFatal)))
	if err := roster.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, errs := testsupport.Results(t, node.Allocate(t, signer, 1)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	if _, err := newTestRoster(t, pool, newFakeKeys()).AddSigner(t.Context(), unreachable.Hex(), "gcpKms", "projects/p/locations/l/keyRings/r/cryptoKeys/late/cryptoKeyVersions/1", "", "op"); err != nil {
		t.Fatal(err)
	}
	if entry, err := roster.RetireSigner(t.Context(), signer.Hex(), "", "operator"); err != nil || entry.State != domain.RosterRetiring {
		t.Fatalf("retire: %+v, %v; want retiring", entry, err)
	}
	confirmAll(t, pool, signer)

	// 6 s left: 4.5 s of building, 1.5 s for the states (a few statements, with room on a
	// loaded machine).
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Second)
	defer cancel()
	if err := roster.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if state, held := keys.State(signer); held || state != domain.RosterRetired {
		t.Fatalf("after a poll with 6 s left and a key source that does not answer: state %s, key held %t; want retired, key dropped", state, held)
	}
	if _, held := keys.State(unreachable); held {
		t.Fatal("the key source that does not answer is held")
	}
}
