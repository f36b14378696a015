package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// conditions is the signers' condition as the database records it.
type conditions struct {
	list []services.SignerCondition
	err  error
}

func (c conditions) SignerConditions(context.Context) ([]services.SignerCondition, error) {
	return c.list, c.err
}

// readyAnswer is /readyz's body.
type readyAnswer struct {
	Ready    bool              `json:"ready"`
	Degraded bool              `json:"degraded"`
	Checks   map[string]string `json:"checks"`
	ProbedAt string            `json:"probedAt"`
}

func readyz(t *testing.T, h *Health) (int, readyAnswer) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.Ready(rec, httptest.NewRequest("GET", "/readyz", nil))
	var body readyAnswer
	if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
		t.Fatalf("/readyz body %q: %v", rec.Body, err)
	}
	return rec.Code, body
}

// Readiness is the database answering and some chain with a recent head; a chain's outage
// alone is not unreadiness while another chain serves, and signers that cannot serve are
// a detail (degraded), never a reason to leave the load balancer.
func TestReadinessProbesTheDatabaseAndTheChains(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	unreachable, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unreachable.Close)
	failing := time.Now().Add(-time.Minute)
	signers := func(t *testing.T, store conditions) *services.SignerConditions {
		c, err := services.NewSignerConditions(services.SignerConditionsConfig{}, store, telemetry.Noop())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	fresh := func() *fakeChain { return &fakeChain{} }
	tests := []struct {
		name   string
		pool   *pgxpool.Pool
		chains func(t *testing.T) []ReadinessChain
		status int
		// checks the answer must hold (all of them; "*": present, with a value that
		// depends on the clock), and degraded.
		checks   map[string]string
		degraded bool
	}{
		{name: "database and chain answer", pool: pool, chains: func(*testing.T) []ReadinessChain { return []ReadinessChain{{ID: 1, Chain: fresh()}} },
			status: nethttp.StatusOK, checks: map[string]string{"database": "ok", "chain": "ok", "chain_head_age": "*", "database_replication": "synchronous standby"}},
		{name: "the database does not answer", pool: unreachable, chains: func(*testing.T) []ReadinessChain { return []ReadinessChain{{ID: 1, Chain: fresh()}} },
			status: nethttp.StatusServiceUnavailable, checks: map[string]string{"database": "unreachable", "chain": "ok"}},
		{name: "the chain does not answer", pool: pool, chains: func(*testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: &fakeChain{err: errors.New("dial tcp: refused")}}}
		}, status: nethttp.StatusServiceUnavailable, checks: map[string]string{"database": "ok", "chain": "unreachable"}},
		{name: "the chain's head is stale", pool: pool, chains: func(*testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: &fakeChain{headAge: 3 * time.Minute}}}
		}, status: nethttp.StatusServiceUnavailable, checks: map[string]string{"chain": "stale head", "chain_head_age": "*"}},
		{name: "one of two chains down", pool: pool, chains: func(*testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: fresh()}, {ID: 2, Chain: &fakeChain{err: errors.New("timeout")}}}
		}, status: nethttp.StatusOK, checks: map[string]string{"chain_1": "ok", "chain_2": "unreachable"}},
		{name: "every chain down", pool: pool, chains: func(*testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: &fakeChain{headAge: time.Hour}}, {ID: 2, Chain: &fakeChain{err: errors.New("timeout")}}}
		}, status: nethttp.StatusServiceUnavailable, checks: map[string]string{"chain_1": "stale head", "chain_2": "unreachable"}},
		{name: "signers that serve", pool: pool, chains: func(t *testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: fresh(), Signers: signers(t, conditions{list: []services.SignerCondition{{Signer: "0xaa"}}})}}
		}, status: nethttp.StatusOK, checks: map[string]string{"signers": "ok"}},
		{name: "signers that cannot serve: degraded, still ready", pool: pool, chains: func(t *testing.T) []ReadinessChain {
			return []ReadinessChain{{ID: 1, Chain: fresh(), Signers: signers(t, conditions{list: []services.SignerCondition{
				{Signer: "0xaa", Quarantined: true}, {Signer: "0xbb", SigningFailingSince: &failing}, {Signer: "0xcc"},
			}})}}
		}, status: nethttp.StatusOK, degraded: true,
			checks: map[string]string{"signers": "2 of 3 signers cannot serve: 1 quarantined, 1 with a key source that fails to sign"}},
		{name: "signers' condition unknown", pool: pool, chains: func(t *testing.T) []ReadinessChain {
			return []ReadinessChain{
				{ID: 1, Chain: fresh(), Signers: signers(t, conditions{err: errors.New("timeout")})},
				{ID: 2, Chain: fresh(), Signers: signers(t, conditions{})},
			}
		}, status: nethttp.StatusOK, checks: map[string]string{"signers_1": "unknown (database)", "signers_2": "ok"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := conf.Server{ReadinessInterval: conf.Duration(time.Hour)}
			h := NewHealth(c, tt.pool, replication("synchronous standby"), tt.chains(t), telemetry.Noop())
			status, body := readyz(t, h)
			if status != tt.status || body.Ready != (tt.status == nethttp.StatusOK) || body.Degraded != tt.degraded {
				t.Fatalf("%d ready=%t degraded=%t, want %d degraded=%t (checks %v)", status, body.Ready, body.Degraded, tt.status, tt.degraded, body.Checks)
			}
			for k, v := range tt.checks {
				if got, ok := body.Checks[k]; !ok || (v != "*" && got != v) {
					t.Errorf("check %s = %q, want %q (all %v)", k, body.Checks[k], v, body.Checks)
				}
			}
			if _, err := time.Parse(time.RFC3339Nano, body.ProbedAt); err != nil {
				t.Errorf("probedAt %q: %v", body.ProbedAt, err)
			}
		})
	}
}

// However often /readyz is hit, the database and the chain are probed at most once per
// interval, concurrent requests share one probe, and each probe is counted.
func TestReadinessProbesAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	prom, cleanup, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	metrics, err := telemetry.NewMetricsFromPrometheus(prom, tracenoop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	chain := &fakeChain{}
	c := conf.Server{ReadinessInterval: conf.Duration(10 * time.Second)}
	h := NewHealth(c, testsupport.MigratedPool(t), replication("async"), []ReadinessChain{{ID: 1, Chain: chain}}, metrics)
	var mu sync.Mutex
	now := time.Now()
	h.now = func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	steps := []struct {
		name     string
		advance  time.Duration
		requests int
		// probes is how many times the chain was asked in all, after the step.
		probes int
	}{
		{"concurrent requests share the first probe", 0, 8, 1},
		{"within the interval the answer is reused", 9 * time.Second, 3, 1},
		{"after it the next request probes again", 2 * time.Second, 2, 2},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			mu.Lock()
			now = now.Add(s.advance)
			mu.Unlock()
			var wg sync.WaitGroup
			for range s.requests {
				wg.Go(func() {
					if status, _ := readyz(t, h); status != nethttp.StatusOK {
						t.Errorf("/readyz %d", status)
					}
				})
			}
			wg.Wait()
			if got := chain.probeCount(); got != s.probes {
				t.Fatalf("chain probed %d times, want %d", got, s.probes)
			}
		})
	}
	rec := httptest.NewRecorder()
	prom.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if want := fmt.Sprintf(`%s{result="ready"} 2`, telemetry.ReadinessProbeTotal); !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/metrics lacks %q:\n%s", want, grepLines(rec.Body.String(), "readiness"))
	}
	live := httptest.NewRecorder()
	h.Live(live, httptest.NewRequest("GET", "/healthz", nil))
	if live.Code != nethttp.StatusOK || !strings.Contains(live.Body.String(), `"ok"`) {
		t.Errorf("/healthz %d %s", live.Code, live.Body)
	}
}
