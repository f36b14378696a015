package writer_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// transferRequest is a create of value wei from signer to itself.
func transferRequest(signer common.Address, value int64) domain.CreateRequest {
	return domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &signer, Value: big.NewInt(value), GasLimit: 21000}}
}

// answer is one Allocate's result.
type answer struct {
	tx      domain.ManagedTx
	created bool
	err     error
}

// allocateAsync runs Allocate on its own goroutine and hands its answer back.
func allocateAsync(w *writer.Writer, req domain.CreateRequest) <-chan answer {
	out := make(chan answer, 1)
	go func() {
		tx, created, err := w.Allocate(context.Background(), req, 21000, nil)
		out <- answer{tx, created, err}
	}()
	return out
}

func await(t *testing.T, ch <-chan answer) answer {
	t.Helper()
	select {
	case a := <-ch:
		return a
	case <-time.After(10 * time.Second):
		t.Fatal("a create was never answered")
		return answer{}
	}
}

// queuedCreates sends n creates, each on its own goroutine: with the worker held at its
// gate, they wait in the queue.
func queuedCreates(t *testing.T, w *writer.Writer, req domain.CreateRequest, n int) []<-chan answer {
	t.Helper()
	answers := make([]<-chan answer, n)
	for i := range answers {
		answers[i] = allocateAsync(w, req)
	}
	return answers
}

// gatedWriter is a writer in front of a node's allocator whose first batch stops at the
// lease check until the test releases it, with the writer's gauges scraped as Prometheus
// scrapes them.
type gatedWriter struct {
	w    *writer.Writer
	node *testsupport.WriterNode
	gate *testsupport.Gate
	pool *pgxpool.Pool
	prom *telemetry.Prometheus
	// release lets the held batch go on; later calls do nothing.
	release func()
}

func newGatedWriter(t *testing.T, cfg writer.QueueConfig) *gatedWriter {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	g := &gatedWriter{pool: pool, node: testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{}), gate: testsupport.NewGate()}
	g.node.Store.SetGates(g.gate, nil)
	prom, cleanup, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	metrics, err := telemetry.NewMetricsFromPrometheus(prom, noop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	g.prom = prom
	if g.w, err = writer.New(cfg, g.node.Allocator, metrics); err != nil {
		t.Fatal(err)
	}
	g.w.Start(context.Background())
	g.release = sync.OnceFunc(func() { close(g.gate.Release) })
	// Cleanups run last first: a failed test releases the batch before the writer stops.
	t.Cleanup(func() { g.w.Stop(context.Background()) })
	t.Cleanup(g.release)
	return g
}

// waitQueued waits until the writer's queue-depth gauge shows n creates waiting for worker
// 0 (the only worker of these tests).
func (g *gatedWriter) waitQueued(t *testing.T, n int) {
	t.Helper()
	want := fmt.Sprintf(`writer_queue_depth{worker="0"} %d`, n)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		rec := httptest.NewRecorder()
		g.prom.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		if strings.Contains(rec.Body.String(), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue never showed %q", want)
		}
	}
}

// A full queue answers UNAVAILABLE at once rather than holding the caller; what was queued
// is written once the worker is free again, in one batch.
func TestWriterFullQueueAnswersAtOnce(t *testing.T) {
	t.Parallel()
	g := newGatedWriter(t, writer.QueueConfig{Workers: 1, BatchSize: 16, QueueSize: 2})
	w, node, gate := g.w, g.node, g.gate
	signer := testsupport.SignerAddress(100)
	first := allocateAsync(w, transferRequest(signer, 1))
	<-gate.Reached // the worker holds the first create in its batch
	queued := queuedCreates(t, w, transferRequest(signer, 2), 2)
	g.waitQueued(t, 2)

	started := time.Now()
	_, _, err := w.Allocate(t.Context(), transferRequest(signer, 3), 21000, nil)
	var unavailable *domain.UnavailableError
	if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), "queue full") || unavailable.RetryAfter <= 0 || time.Since(started) > time.Second {
		t.Fatalf("a create on a full queue: %v after %s, want UNAVAILABLE (queue full) with a retry hint, at once", err, time.Since(started))
	}

	g.release()
	if a := await(t, first); a.err != nil || !a.created || a.tx.Nonce != 0 {
		t.Fatalf("the first create: %+v", a)
	}
	checksBefore := node.Store.LeaseChecks.Load() + node.Store.ClearCalls.Load()
	nonces := map[uint64]bool{}
	for _, ch := range queued {
		a := await(t, ch)
		if a.err != nil || !a.created {
			t.Fatalf("a queued create: %+v", a)
		}
		nonces[a.tx.Nonce] = true
	}
	if !nonces[1] || !nonces[2] {
		t.Fatalf("the queued creates got nonces %v, want 1 and 2", nonces)
	}
	if got := node.Store.LeaseChecks.Load() + node.Store.ClearCalls.Load() - checksBefore; got > 1 {
		t.Errorf("the two queued creates were written in %d batches, want one", got)
	}
}

// Shutdown stops intake at once and writes what was already queued before it returns; if
// its deadline passes first, what is left is failed as UNAVAILABLE rather than left hanging,
// and nothing of it is written.
func TestWriterStopFlushesOrFailsWhatIsQueued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// deadline bounds the shutdown; the worker is released after release.
		deadline, release time.Duration
		wantWritten       bool
	}{
		{"the queue flushes within the deadline", 10 * time.Second, 100 * time.Millisecond, true},
		{"the deadline passes first", 100 * time.Millisecond, 300 * time.Millisecond, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The queue is full once the two creates wait: a probe is refused at once, as
			// full before the shutdown and as shutting down after, and never joins it.
			g := newGatedWriter(t, writer.QueueConfig{Workers: 1, BatchSize: 16, QueueSize: 2})
			w, gate := g.w, g.gate
			signer := testsupport.SignerAddress(101)
			first := allocateAsync(w, transferRequest(signer, 1))
			<-gate.Reached
			queued := queuedCreates(t, w, transferRequest(signer, 2), 2)
			g.waitQueued(t, 2)

			stopped := make(chan struct{})
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
				defer cancel()
				w.Stop(ctx)
				close(stopped)
			}()
			// Intake is closed as soon as Stop starts: a new create is refused.
			deadline := time.Now().Add(5 * time.Second)
			for {
				_, _, err := w.Allocate(t.Context(), transferRequest(signer, 9), 21000, nil)
				if err != nil && strings.Contains(err.Error(), "shutting down") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a create during shutdown: %v, want refused as shutting down", err)
				}
				time.Sleep(time.Millisecond)
			}
			time.Sleep(tc.release)
			g.release()
			select {
			case <-stopped:
			case <-time.After(10 * time.Second):
				t.Fatal("Stop did not return")
			}
			for i, ch := range append([]<-chan answer{first}, queued...) {
				a := await(t, ch)
				if tc.wantWritten && (a.err != nil || !a.created) {
					t.Fatalf("create %d: %+v, want written", i, a)
				}
				if !tc.wantWritten && !errors.Is(a.err, domain.ErrUnavailable) {
					t.Fatalf("create %d: %+v, want UNAVAILABLE", i, a)
				}
			}
			var rows int
			if err := g.pool.QueryRow(t.Context(), "SELECT count(*) FROM managed_tx WHERE signer = $1", signer.Hex()).Scan(&rows); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]int{true: 3, false: 0}[tc.wantWritten]; rows != want {
				t.Fatalf("%d rows written, want %d", rows, want)
			}
		})
	}
}

// With BatchWait a worker holding a create waits that long for more before it writes, so
// creates arriving close together share one database transaction; a batch that is full is
// written at once, without waiting.
func TestWriterBatchWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       writer.QueueConfig
		creates   int
		spacing   time.Duration
		maxTook   time.Duration
		wantBatch int
	}{
		{"creates within the wait share a batch", writer.QueueConfig{Workers: 1, BatchSize: 8, QueueSize: 8, BatchWait: 600 * time.Millisecond},
			3, 50 * time.Millisecond, 5 * time.Second, 1},
		{"a full batch is written without waiting", writer.QueueConfig{Workers: 1, BatchSize: 2, QueueSize: 8, BatchWait: 10 * time.Second},
			2, 0, 5 * time.Second, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGatedWriter(t, tc.cfg)
			g.release() // nothing is held: the gate lets the first batch through
			signer := testsupport.SignerAddress(102)
			started := time.Now()
			answers := make([]<-chan answer, tc.creates)
			for i := range answers {
				answers[i] = allocateAsync(g.w, transferRequest(signer, int64(i+1)))
				time.Sleep(tc.spacing)
			}
			for i, ch := range answers {
				if a := await(t, ch); a.err != nil || !a.created {
					t.Fatalf("create %d: %+v", i, a)
				}
			}
			if took := time.Since(started); took > tc.maxTook {
				t.Fatalf("answered after %s, want within %s", took, tc.maxTook)
			}
			if got := int(g.node.Store.LeaseChecks.Load() + g.node.Store.ClearCalls.Load()); got != tc.wantBatch {
				t.Fatalf("%d creates were written in %d batches, want %d", tc.creates, got, tc.wantBatch)
			}
		})
	}
}

// The writer tells the outcome of a create whose caller stopped waiting when it has one:
// the caller is answered OUTCOME_UNKNOWN while the create is queued, and the row is written
// after. What counts the create's cost (the funds check) learns of it then, not when the
// caller gave up. A create the queue could not take is told so at once.
func TestWriterTellsTheOutcomeOfACreateWhoseCallerStoppedWaiting(t *testing.T) {
	t.Parallel()
	g := newGatedWriter(t, writer.QueueConfig{Workers: 1, BatchSize: 16, QueueSize: 1})
	w, gate := g.w, g.gate
	signer := testsupport.SignerAddress(101)
	first := allocateAsync(w, transferRequest(signer, 1))
	<-gate.Reached // the worker holds the first create in its batch

	told := make(chan answer, 2)
	resolved := func(tx domain.ManagedTx, created bool, err error) { told <- answer{tx, created, err} }
	ctx, cancel := context.WithCancel(t.Context())
	waiting := make(chan error, 1)
	go func() {
		_, _, err := w.Allocate(ctx, transferRequest(signer, 2), 21000, resolved)
		waiting <- err
	}()
	g.waitQueued(t, 1)
	cancel()
	if err := <-waiting; !errors.Is(err, domain.ErrOutcomeUnknown) {
		t.Fatalf("a caller that stopped waiting: %v, want OUTCOME_UNKNOWN", err)
	}
	if _, _, err := w.Allocate(t.Context(), transferRequest(signer, 3), 21000, resolved); err == nil {
		t.Fatal("a create on a full queue was taken")
	}
	if a := <-told; a.err == nil || a.created {
		t.Fatalf("the create the full queue refused was told %+v, want its refusal", a)
	}
	select {
	case a := <-told:
		t.Fatalf("told %+v before the writer wrote it", a)
	default:
	}

	g.release()
	if a := await(t, first); a.err != nil || !a.created {
		t.Fatalf("the first create: %+v", a)
	}
	if a := await(t, told); a.err != nil || !a.created || a.tx.Nonce != 1 {
		t.Fatalf("the create whose caller stopped waiting was told %+v, want created at nonce 1", a)
	}
}
