package services_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// testLogger keeps the use cases' logs out of the test output unless -v asks for them.
func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// signingRecord is one RecordSigningHealth call.
type signingRecord struct {
	failing bool
	cause   string
}

// signingStore stands for the signing repository in the unit tests of the bounds: the
// backlog it reports, and what it was told to record.
type signingStore struct {
	mu      sync.Mutex
	backlog int
	records []signingRecord
	events  []string
}

func (s *signingStore) AppendEvent(_ context.Context, e services.ServiceEvent) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e.Kind)
	return nil
}

func (s *signingStore) RecordSigningHealth(_ context.Context, _ domain.Lease, failingSince *time.Time, lastError string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	wasFailing := len(s.records) > 0 && s.records[len(s.records)-1].failing
	s.records = append(s.records, signingRecord{failing: failingSince != nil, cause: lastError})
	return wasFailing, nil
}

func (s *signingStore) UnsignedBacklog(context.Context, string) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backlog, nil
}

func (s *signingStore) recorded() []signingRecord {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]signingRecord(nil), s.records...)
}

// A signer whose key source fails keeps taking creates until its backlog (counted, plus the
// creates let through since) or the time it has failed reaches the bound; a signature, or
// the lease moving to another node, lets it serve again at once.
func TestSigningHealthAdmitsWithinTheStallBounds(t *testing.T) {
	t.Parallel()
	lease := domain.Lease{Signer: "0xsigner", Owner: "node-a", Token: 2}
	kms := errors.New("kms: throttled")
	tests := []struct {
		name    string
		backlog int
		// steps run in order before the admissions; then admit is tried len(want) times.
		steps func(h *services.SigningHealth, clock *steppedClock)
		want  []bool // per Admit: admitted?
	}{
		{"a key source that signs", 1000, func(*services.SigningHealth, *steppedClock) {}, []bool{true, true}},
		{"failing, below both bounds", 1, func(h *services.SigningHealth, _ *steppedClock) { h.Failed(context.Background(), lease, kms) }, []bool{true}},
		{"failing with the backlog at the bound", 3, func(h *services.SigningHealth, _ *steppedClock) { h.Failed(context.Background(), lease, kms) }, []bool{false}},
		{"creates let through count toward the bound", 1, func(h *services.SigningHealth, _ *steppedClock) { h.Failed(context.Background(), lease, kms) },
			[]bool{true, true, false}},
		{"failing for longer than the bound", 1, func(h *services.SigningHealth, c *steppedClock) {
			h.Failed(context.Background(), lease, kms)
			c.now = c.now.Add(time.Minute)
		}, []bool{false}},
		// A resolution's signature emptied the backlog, then a pass failed: only a signature
		// ends the failure, and with nothing waiting nothing would be signed.
		{"failing for long with nothing waiting lets one create through", 0, func(h *services.SigningHealth, c *steppedClock) {
			h.Failed(context.Background(), lease, kms)
			c.now = c.now.Add(time.Minute)
		}, []bool{true, false}},
		{"a failure seen under an earlier lease", 3, func(h *services.SigningHealth, _ *steppedClock) {
			h.Failed(context.Background(), domain.Lease{Signer: lease.Signer, Owner: "node-a", Token: lease.Token - 1}, kms)
		}, []bool{true, true, true}},
		{"a late report of an earlier lease's failure", 3, func(h *services.SigningHealth, _ *steppedClock) {
			h.Failed(context.Background(), lease, kms)
			h.Failed(context.Background(), domain.Lease{Signer: lease.Signer, Owner: "node-a", Token: lease.Token - 1}, errors.New("an older error"))
		}, []bool{false}},
		{"signing again", 3, func(h *services.SigningHealth, _ *steppedClock) {
			h.Failed(context.Background(), lease, kms)
			h.Signed(context.Background(), lease)
		}, []bool{true}},
		{"the lease went to another node", 3, func(h *services.SigningHealth, _ *steppedClock) {
			h.Failed(context.Background(), lease, kms)
			h.Forget(lease.Signer)
		}, []bool{true}},
		{"the caller's own shutdown is not the key source failing", 3, func(h *services.SigningHealth, _ *steppedClock) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			h.Failed(ctx, lease, fmt.Errorf("sign: %w", context.Canceled))
			h.Failed(context.Background(), lease, nil)
		}, []bool{true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
			h := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 3, MaxDuration: 30 * time.Second}, &signingStore{backlog: tc.backlog}, clock, testLogger())
			tc.steps(h, clock)
			for i, want := range tc.want {
				err := h.Admit(lease)
				if (err == nil) != want {
					t.Fatalf("admission %d: %v, want admitted %t", i, err, want)
				}
				var unavailable *domain.SignerUnavailableError
				if err != nil && (!errors.As(err, &unavailable) || !errors.Is(err, domain.ErrSignerUnavailable) || unavailable.Cause != kms.Error() || unavailable.RetryAfter <= 0) {
					t.Fatalf("refusal %v: want SIGNER_UNAVAILABLE with the key source's error and a time to retry after", err)
				}
			}
		})
	}
}

// The create let through while nothing waits is the signature that can end the failure;
// one that never took a nonce (a replay, a refusal by funds or policy) does not use the
// chance up for good: once it would have been signed or counted, another may try.
func TestSigningHealthProbesAgainAfterACreateThatTookNoNonce(t *testing.T) {
	t.Parallel()
	lease := domain.Lease{Signer: "0xsigner", Owner: "node-a", Token: 1}
	clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
	h := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 3, MaxDuration: 30 * time.Second}, &signingStore{backlog: 0}, clock, testLogger())
	h.Failed(context.Background(), lease, errors.New("kms: disabled"))
	clock.now = clock.now.Add(time.Minute)
	steps := []struct {
		after time.Duration
		want  bool
	}{
		{0, true},               // nothing waits: one create goes through
		{time.Second, false},    // it may be on its way to a nonce
		{6 * time.Second, true}, // it would have been counted by now: it took none
		{0, false},
	}
	for i, st := range steps {
		clock.now = clock.now.Add(st.after)
		if err := h.Admit(lease); (err == nil) != st.want {
			t.Fatalf("admission %d: %v, want admitted %t", i, err, st.want)
		}
	}
}

// What is recorded for every node to see: a failure when it starts, again when its error
// changes or has gone on for a while (its time shows it is current), not for every
// failed batch; and the end of a failure once.
func TestSigningHealthRecordsAFailureWhenItStartsOrChanges(t *testing.T) {
	t.Parallel()
	lease := domain.Lease{Signer: "0xsigner", Owner: "node-a", Token: 1}
	clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
	store := &signingStore{}
	h := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 100}, store, clock, testLogger())
	steps := []struct {
		name string
		do   func()
		want []signingRecord // every record so far
	}{
		{"the first failure", func() { h.Failed(context.Background(), lease, errors.New("timeout")) }, []signingRecord{{true, "timeout"}}},
		{"the same failure a second later", func() {
			clock.now = clock.now.Add(time.Second)
			h.Failed(context.Background(), lease, errors.New("timeout"))
		}, []signingRecord{{true, "timeout"}}},
		{"another error", func() { h.Failed(context.Background(), lease, errors.New("key disabled")) }, []signingRecord{{true, "timeout"}, {true, "key disabled"}}},
		{"the same error, long after it was recorded", func() {
			clock.now = clock.now.Add(time.Minute)
			h.Failed(context.Background(), lease, errors.New("key disabled"))
		}, []signingRecord{{true, "timeout"}, {true, "key disabled"}, {true, "key disabled"}}},
		{"a signature", func() { h.Signed(context.Background(), lease) }, []signingRecord{{true, "timeout"}, {true, "key disabled"}, {true, "key disabled"}, {false, ""}}},
		{"another signature: nothing was failing", func() { h.Signed(context.Background(), lease) },
			[]signingRecord{{true, "timeout"}, {true, "key disabled"}, {true, "key disabled"}, {false, ""}}},
	}
	for _, s := range steps {
		s.do()
		if got := store.recorded(); fmt.Sprint(got) != fmt.Sprint(s.want) {
			t.Fatalf("%s: recorded %v, want %v", s.name, got, s.want)
		}
	}
	// Webhook subscribers hear of the failure once, when it starts, and of its end.
	store.mu.Lock()
	defer store.mu.Unlock()
	if want := []string{domain.EventSigningFailing, domain.EventSigningResumed}; fmt.Sprint(store.events) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", store.events, want)
	}
}

// A key source's error is stored and shown to operators: what could be a credential is
// removed, what locates the fault (endpoint host, key id, the reason) is kept.
func TestCleanSigningErrorRedactsSecrets(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("ab", 32)
	tests := []struct {
		name       string
		err        error
		keep, drop []string
	}{
		{"a plain error is kept as it is", errors.New("kms: key projects/p/keys/k is disabled"), []string{"kms: key projects/p/keys/k is disabled"}, nil},
		{"credentials in a URL", errors.New("dial https://alice:hunter2@signer.internal:8550/rpc: refused"),
			[]string{"https://signer.internal:8550/…", "refused"}, []string{"alice", "hunter2"}},
		{"a request URL's query and user", &url.Error{Op: "Post", URL: "https://bob:pw@kms.example/sign?token=abc&x=1#frag", Err: errors.New("timeout")},
			[]string{"https://kms.example/…", "timeout"}, []string{"bob", "pw@", "token=abc", "frag"}},
		{"a key in the path", errors.New(`Post "https://signer.example/v1/SIGNERAPIKEY": EOF`), []string{"https://signer.example/…", "EOF"}, []string{"SIGNERAPIKEY"}},
		{"something shaped like a private key", errors.New("bad key 0x" + key), []string{"bad key [redacted]"}, []string{key}},
		{"a credential parameter", errors.New(`request failed: password=s3cret&region=eu "signature=deadbeef"`),
			[]string{"password=[redacted]", "region=eu", "signature=[redacted]"}, []string{"s3cret", "deadbeef"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := services.CleanSigningError(tc.err)
			for _, s := range tc.keep {
				if !strings.Contains(got, s) {
					t.Errorf("%q lost %q", got, s)
				}
			}
			for _, s := range tc.drop {
				if strings.Contains(got, s) {
					t.Errorf("%q still shows %q", got, s)
				}
			}
		})
	}
	long := services.CleanSigningError(errors.New(strings.Repeat("x", 1000)))
	if len(long) > 310 || !strings.HasSuffix(long, "…") {
		t.Errorf("a 1000-character error is stored as %d characters (%q...), want it bounded and marked cut", len(long), long[:20])
	}
	// Cut across a character, or invalid from the source: stored as valid UTF-8, which
	// PostgreSQL requires of text.
	for _, raw := range []string{strings.Repeat("x", 299) + strings.Repeat("é", 10), "bad \xff\xfe bytes " + strings.Repeat("ü", 200)} {
		if got := services.CleanSigningError(errors.New(raw)); !utf8.ValidString(got) {
			t.Errorf("%q... is stored as invalid UTF-8", got[:20])
		}
	}
}

// The condition the owner finds is recorded in the database, so every node reports it
// (signer status, gauges, readiness): the failure with its cleaned error while it lasts;
// once the key source signs again the signer serves, its last error kept on record.
func TestSigningHealthIsRecordedForEveryNode(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(40)
	lease, err := node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	store := repositories.NewSigningRepository(pool, testsupport.TestChain())
	h := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 10, MaxDuration: time.Minute}, store, services.SystemClock{}, testLogger())
	admin := repositories.NewAdminRepository(pool, testsupport.TestChain())
	condition := func() services.SignerCondition {
		status, err := admin.SignerStatus(t.Context(), signer.Hex())
		if err != nil {
			t.Fatal(err)
		}
		return status.Condition
	}

	h.Failed(t.Context(), lease, errors.New("dial https://user:pw@kms.example: refused"))
	if c := condition(); c.SigningFailingSince == nil || !strings.Contains(c.SigningError, "refused") || strings.Contains(c.SigningError, "pw") {
		t.Fatalf("after a failure: %+v, want it failing with the cleaned error", c)
	}
	h.Signed(t.Context(), lease)
	if c := condition(); c.SigningFailingSince != nil || !c.CanServe() {
		t.Fatalf("after a signature: %+v, want it serving", c)
	}
}

// A node's view of a signer's key source ends with its lease: a node that gets the lease
// back does not refuse creates for a failure it saw under the old one. And a failure on
// record from an earlier owner, or from this node before a restart, ends with the first
// signature under a lease, told to subscribers as the failure's end.
func TestSigningHealthFollowsTheLease(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(41)
	lease, err := node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	store := repositories.NewSigningRepository(pool, testsupport.TestChain())
	admin := repositories.NewAdminRepository(pool, testsupport.TestChain())
	failing := func() bool {
		status, err := admin.SignerStatus(t.Context(), signer.Hex())
		if err != nil {
			t.Fatal(err)
		}
		return status.Condition.SigningFailingSince != nil
	}
	stall := services.SigningStallConfig{MaxUnsigned: 1, MaxDuration: time.Nanosecond}

	before := services.NewSigningHealth(stall, store, services.SystemClock{}, testLogger())
	before.FollowLeases(node.Leases)
	before.Failed(t.Context(), lease, errors.New("kms: throttled"))
	if err := before.Admit(lease); err != nil {
		t.Fatalf("the first create with nothing waiting for a signature: %v, want it admitted", err)
	}
	if err := before.Admit(lease); !errors.Is(err, domain.ErrSignerUnavailable) {
		t.Fatalf("a create while the key source fails past the bound: %v, want SIGNER_UNAVAILABLE", err)
	}
	node.Leases.Fenced(t.Context(), lease, "a test's write") // the lease ends here
	// A signing pass still running under the lease that ended (a KMS that hangs) reports
	// its failure after the end: it must not outlive that lease.
	before.Failed(t.Context(), lease, errors.New("kms: timed out"))
	again, err := node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	if err := before.Admit(again); err != nil {
		t.Fatalf("a create once the lease that saw the failure ended: %v, want it admitted", err)
	}
	node.Leases.Fenced(t.Context(), again, "a test's write")

	// A new process (or owner) that never saw the failure: the record still holds it.
	if lease, err = node.Leases.Acquire(t.Context(), signer.Hex()); err != nil {
		t.Fatal(err)
	}
	if !failing() {
		t.Fatal("the failure is not on record: this case tests nothing")
	}
	after := services.NewSigningHealth(stall, store, services.SystemClock{}, testLogger())
	after.Signed(t.Context(), lease)
	if failing() {
		t.Fatal("the failure recorded before stays on record after a signature under a new lease")
	}
	var resumed int
	if err := pool.QueryRow(t.Context(), `SELECT count(*) FROM service_event WHERE kind = $1`, domain.EventSigningResumed).Scan(&resumed); err != nil || resumed != 1 {
		t.Fatalf("%d signing-resumed events (%v), want 1", resumed, err)
	}
}
