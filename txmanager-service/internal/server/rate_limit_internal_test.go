package server

import (
	"errors"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/console"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// A request costs its credential one token per create: a batch larger than the burst passes
// when the bucket is full and leaves it in debt, so its credential waits as long as for the
// same creates sent one by one; the debt is not forgiven by sweeping the bucket as idle.
func TestRateLimitChargesEveryCreateOfABatch(t *testing.T) {
	t.Parallel()
	start := time.Unix(1_700_000_000, 0)
	steps := []struct {
		name  string
		at    time.Duration
		id    string
		n     int
		wait  time.Duration
		delta time.Duration // the wait may be this much shorter (the bucket refills continuously)
	}{
		{name: "a batch of 5 with a full bucket of 2 passes", at: 0, id: "a", n: 5},
		{name: "a create a second later waits for the debt of 3", at: time.Second, id: "a", n: 1, wait: 3 * time.Second},
		{name: "another credential is not in debt", at: time.Second, id: "b", n: 1},
		{name: "past the idle sweep's time the debt still stands", at: 3500 * time.Millisecond, id: "a", n: 1, wait: 500 * time.Millisecond},
		{name: "once the debt is paid a create passes", at: 4 * time.Second, id: "a", n: 1},
		{name: "a batch over the burst waits for a full bucket", at: 4 * time.Second, id: "a", n: 10, wait: 2 * time.Second},
	}
	l := NewRateLimiter(conf.Server{RateLimit: conf.RateLimit{Enabled: true, RequestsPerSecond: 1, Burst: 2}}, telemetry.Noop())
	for _, s := range steps {
		got := l.reserve(s.id, start.Add(s.at), s.n)
		if got > s.wait || got < s.wait-s.delta-time.Millisecond {
			t.Fatalf("%s: wait %v, want %v", s.name, got, s.wait)
		}
	}
}

// The console's pages are charged to their credential's rate like the API's calls: past it,
// the console is told how long to wait instead of being a way around the limit.
func TestConsoleRequestsCountAgainstTheRateLimit(t *testing.T) {
	t.Parallel()
	l := NewRateLimiter(conf.Server{RateLimit: conf.RateLimit{Enabled: true, RequestsPerSecond: 0.1, Burst: 1}}, telemetry.Noop())
	authenticate := l.consoleAuth(func(func(string) string) (domain.Principal, error) { return domain.Principal{ID: "operator"}, nil })
	if p, err := authenticate(nil); err != nil || p.ID != "operator" {
		t.Fatalf("the first page: %+v %v", p, err)
	}
	_, err := authenticate(nil)
	var limited *console.RateLimitedError
	if !errors.As(err, &limited) || limited.RetryAfterSeconds != 10 {
		t.Fatalf("the second page at 0.1 a second: %v, want a wait of 10 s", err)
	}
}

// A batch costs each of its creates, but one larger than a batch may be (refused whole) no
// more than the largest served: 5,000 empty creates must not leave the credential in debt
// for 5,000 creates' worth.
func TestABatchCostsAtMostTheLargestServed(t *testing.T) {
	t.Parallel()
	batch := func(n int) *v1.CreateTxBatchRequest {
		return &v1.CreateTxBatchRequest{Creates: make([]*v1.CreateTxRequest, n)}
	}
	tests := []struct {
		name string
		req  any
		want int
	}{
		{"a single create", &v1.CreateTxRequest{}, 1},
		{"an empty batch", batch(0), 1},
		{"a batch of 100", batch(100), 100},
		{"a batch of the most allowed", batch(controllers.MaxBatchCreates), controllers.MaxBatchCreates},
		{"a batch over the bound", batch(5000), controllers.MaxBatchCreates},
	}
	for _, tt := range tests {
		if got := creates(tt.req); got != tt.want {
			t.Errorf("%s costs %d, want %d", tt.name, got, tt.want)
		}
	}
}
