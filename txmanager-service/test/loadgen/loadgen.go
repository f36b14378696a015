// Package loadgen drives create requests at an HTTP endpoint from many concurrent clients
// and reports throughput and latency, for the service's benchmarks (with wrk when it is
// installed, otherwise with its own Go clients).
package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes one run.
type Config struct {
	// URL receives POSTs.
	URL string
	// Concurrency is the number of clients, each sending one request at a time.
	Concurrency int
	// Requests to send in total (if > 0); otherwise the run lasts Duration.
	Requests int
	Duration time.Duration
	// Body returns the JSON body of request i.
	Body func(i int) []byte
}

// Result summarises a run.
type Result struct {
	Requests  int
	Failures  int
	Elapsed   time.Duration
	P50, P99  time.Duration
	Max       time.Duration
	FirstFail string
}

// PerSecond is successful requests per second.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests-r.Failures) / r.Elapsed.Seconds()
}

func (r Result) String() string {
	return fmt.Sprintf("%d requests (%d failed) in %s: %.0f/s, p50 %s, p99 %s, max %s",
		r.Requests, r.Failures, r.Elapsed.Round(time.Millisecond), r.PerSecond(), r.P50, r.P99, r.Max)
}

// NewClient is an HTTP client that keeps one connection per concurrent caller alive.
func NewClient(concurrency int) *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			MaxIdleConns:        concurrency * 2,
			MaxIdleConnsPerHost: concurrency * 2,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// Run sends the load and waits for every client to finish.
func Run(ctx context.Context, client *http.Client, cfg Config) Result {
	var (
		next      atomic.Int64
		failures  atomic.Int64
		firstFail atomic.Pointer[string]
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, max(cfg.Requests, 1024))
		wg        sync.WaitGroup
	)
	deadline := time.Now().Add(cfg.Duration)
	started := time.Now()
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1024)
			defer func() {
				mu.Lock()
				latencies = append(latencies, local...)
				mu.Unlock()
			}()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if cfg.Requests > 0 && i >= cfg.Requests {
					return
				}
				if cfg.Requests <= 0 && time.Now().After(deadline) {
					return
				}
				t0 := time.Now()
				status, body, err := post(ctx, client, cfg.URL, cfg.Body(i))
				local = append(local, time.Since(t0))
				if err != nil || status < 200 || status >= 300 {
					failures.Add(1)
					msg := fmt.Sprintf("status %d: %v %s", status, err, body)
					firstFail.CompareAndSwap(nil, &msg)
				}
			}
		}()
	}
	wg.Wait()
	res := Result{Requests: len(latencies), Failures: int(failures.Load()), Elapsed: time.Since(started)}
	if p := firstFail.Load(); p != nil {
		res.FirstFail = *p
	}
	if len(latencies) > 0 {
		slices.Sort(latencies)
		res.P50 = latencies[len(latencies)/2]
		res.P99 = latencies[min(len(latencies)-1, len(latencies)*99/100)]
		res.Max = latencies[len(latencies)-1]
	}
	return res
}

func post(ctx context.Context, client *http.Client, url string, body []byte) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return resp.StatusCode, string(raw), nil
	}
	return resp.StatusCode, "", nil
}
