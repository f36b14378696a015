package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/loadgen"
)

// receiptCountingProxy forwards JSON-RPC and counts requests carrying receipt look-ups and
// the look-ups inside them (a batch request holds many).
type receiptCountingProxy struct {
	target   string
	requests atomic.Int64
	lookups  atomic.Int64
}

func (p *receiptCountingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if n := strings.Count(string(body), "eth_getTransactionReceipt"); n > 0 {
		p.requests.Add(1)
		p.lookups.Add(int64(n))
	}
	e2e.ForwardJSONRPC(w, r, p.target, body, nil)
}

// BenchmarkReceiptPipeline is issue 4's receipt figure: 10,000 transactions in flight from
// 10 signers; once their blocks (and the confirmation blocks) are mined, how long until all
// 10,000 are CONFIRMED, and how many JSON-RPC requests the receipt look-ups cost per 1,000
// receipts checked (target: at most 20, through batching).
func BenchmarkReceiptPipeline(b *testing.B) {
	const signers, perSigner = 10, 1000
	const total = signers * perSigner
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: signers + 1, HTTPAddr: "127.0.0.1:0", TxPoolSlots: 2 * total})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sim.Close() })
	sim.Commit()
	proxy := &receiptCountingProxy{target: sim.HTTPEndpoint()}
	front := httptest.NewServer(proxy)
	b.Cleanup(front.Close)
	s := startService(b, serviceOptions{chain: sim, signers: signers, configure: func(bc *conf.Bootstrap) {
		bc.Chain.RPCURL = front.URL
		fast := conf.Duration(200 * time.Millisecond)
		bc.Pipeline.SubmitInterval, bc.Pipeline.FinalityInterval, bc.Pipeline.Receipts.PollInterval = fast, fast, fast
		bc.Resubmit.Interval = conf.Duration(10 * time.Minute) // nothing is lost here; keep rebroadcasts out of the figure
		bc.Confirmations.Required = 3
	}})
	recipient := sim.DevAddresses()[signers].Hex()

	for b.Loop() {
		ctx := context.Background()
		started := time.Now()
		res := loadgen.Run(ctx, loadgen.NewClient(64), loadgen.Config{
			URL: s.httpURL + "/api/v1/tx", Concurrency: 64, Requests: total,
			Body: func(i int) []byte {
				body, _ := json.Marshal(map[string]any{"signer": sim.DevAddresses()[i%signers].Hex(), "to": recipient, "value": fmt.Sprint(i + 1), "gasLimit": 21000})
				return body
			},
		})
		if res.Failures > 0 {
			b.Fatalf("creates failed: %s", res.FirstFail)
		}
		waitFor(b, 2*time.Minute, "all broadcast", func() bool {
			if s.count(b, "SELECT count(*) FROM managed_tx WHERE sub_state = 'SUBMITTED'") == total {
				return true
			}
			var summary string
			_ = s.pool.QueryRow(ctx, `SELECT string_agg(state || '/' || coalesce(sub_state, '') || '=' || n, ', ')
				FROM (SELECT state, sub_state, count(*) n FROM managed_tx GROUP BY 1, 2) t`).Scan(&summary)
			b.Logf("waiting: %s", summary)
			time.Sleep(2 * time.Second)
			return false
		})
		b.Logf("10,000 created and broadcast in %s", time.Since(started).Round(time.Millisecond))

		// Mine everything, then the confirmation blocks, and only then start the clock.
		for mined := 0; mined < 200; mined++ {
			sim.Commit()
			done := true
			for _, addr := range sim.DevAddresses()[:signers] {
				if n, err := sim.NonceAt(ctx, addr); err != nil || n < perSigner {
					done = false
					break
				}
			}
			if done {
				break
			}
		}
		for range 3 {
			sim.Commit()
		}
		requestsBefore, lookupsBefore := proxy.requests.Load(), proxy.lookups.Load()
		minedAt := time.Now()
		steal := startStealMeter()
		waitFor(b, 5*time.Minute, "all confirmed", func() bool {
			return s.count(b, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'") == total
		})
		finalAfter := time.Since(minedAt)
		steal.report(b)
		requests, lookups := proxy.requests.Load(), proxy.lookups.Load()
		b.ReportMetric(finalAfter.Seconds(), "s-to-final-10k")
		b.ReportMetric(float64(requests)*1000/float64(max(lookups, 1)), "rpc-req/1000-receipts")
		b.Logf("final %s after mining; receipt look-ups: %d in %d requests overall (%d in %d after mining)",
			finalAfter.Round(time.Millisecond), lookups, requests, lookups-lookupsBefore, requests-requestsBefore)
	}
}
