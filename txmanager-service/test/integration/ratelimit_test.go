package integration

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// A hosted provider over its limit, among two endpoints: whether it answers HTTP 429 with
// Retry-After or the JSON-RPC error -32005, the load moves to the other endpoint, the
// throttling one is left alone for the time it asked (probes included), and no create or
// transaction fails for it.
func TestRateLimitedEndpointHandsItsLoadToTheOther(t *testing.T) {
	t.Parallel()
	const retryAfter = 3 * time.Second
	for _, mode := range []faultproxy.Mode{faultproxy.TooManyRequests, faultproxy.LimitExceeded} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			sim, proxies := proxiedChain(t, 2)
			s := startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, chainQuery: true, configure: throughProxies(proxies, time.Second)})
			proxies[0].SetRetryAfter(retryAfter)
			if err := proxies[0].SetMode(mode); err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			var ids []string
			for i := range 60 {
				// No gas limit: every create asks the chain for an estimate.
				a := s.create(t, map[string]any{"signer": devAddress(t, i%3), "to": devAddress(t, 5), "value": fmt.Sprint(i + 1)})
				if a.status != http.StatusAccepted {
					t.Fatalf("create %d with the first endpoint throttling: %d %s", i, a.status, a.raw)
				}
				ids = append(ids, a.tx()["txId"].(string))
			}
			for _, id := range ids {
				waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
			}
			took := time.Since(started)
			if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE state <> 'CONFIRMED'"); n != 0 {
				t.Fatalf("%d transactions not confirmed", n)
			}
			// Nothing counted against a transaction: no broadcast recorded as failed. (A
			// rebroadcast of the same bytes, when a loaded machine takes longer than the
			// resubmit interval to see one mined, is not a failure.)
			if n := s.metricSumsWhere(t, `result="error"`)["tx_submit_total"]; n != 0 {
				t.Fatalf("tx_submit_total{result=error} = %v: a throttled endpoint failed a broadcast", n)
			}
			limited, served := proxies[0].Limited(), proxies[1].Requests()
			// Left alone between pauses: at most a handful of requests each time it is
			// asked again (a call in flight per loop), not one per call of the run.
			bound := uint64(took/retryAfter+1) * 16
			if limited == 0 || limited > bound {
				t.Fatalf("the throttling endpoint was asked %d times in %s (pause %s; want 1..%d): not left alone", limited, took.Round(time.Millisecond), retryAfter, bound)
			}
			// Idle, the prober (every 200 ms) asks it again only once each pause is over: its
			// Retry-After, or a second when it gave none (-32005 has no header).
			pause := retryAfter
			if mode == faultproxy.LimitExceeded {
				pause = time.Second
			}
			time.Sleep(2 * retryAfter)
			again := proxies[0].Limited() - limited
			if most := uint64(2*retryAfter/pause) + 1; again < 1 || again > most {
				t.Fatalf("over %s idle the throttling endpoint was asked %d times, want 1..%d (once per %s pause; probes run every 200ms)", 2*retryAfter, again, most, pause)
			}
			t.Logf("%s: 60 creates confirmed in %s; the throttling endpoint was asked %d times, the other served %d requests; idle for %s, it was asked %d times",
				mode, took.Round(time.Millisecond), limited, served, 2*retryAfter, again)
		})
	}
}
