package integration

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Nothing the service does holds one pooled connection while it waits for another. On a
// pool of a single connection, single and batched creates from two signers reach CONFIRMED
// while the API is read, the feed serves each once, and no database transaction failed. A
// path that held a connection and waited for a second would stall here until its
// transaction's timeout; on a pool of any size it would stall once as many callers as
// connections took it at once (database.maxConns 0 sizes the pool at 8 on two cores).
func TestServiceRunsOnOneConnection(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{signers: 2, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
		bc.Database.MaxConns = 1
		bc.Database.MinConns = 1
	}})
	transfer := func(i int) map[string]any {
		return map[string]any{"signer": devAddress(t, i%2), "to": devAddress(t, 5), "value": "1", "gasLimit": 21000, "requestId": fmt.Sprintf("one-conn-%03d", i)}
	}

	var (
		mu  sync.Mutex
		ids []string
		wg  sync.WaitGroup
	)
	for i := range 10 {
		wg.Go(func() {
			id := s.createOK(t, transfer(i))
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
		})
	}
	var creates []map[string]any
	for i := 10; i < 30; i++ {
		creates = append(creates, transfer(i))
	}
	wg.Go(func() {
		answer := s.batch(t, creates)
		if answer.status != http.StatusOK || answer.body.Created != len(creates) {
			t.Errorf("batch of %d: %d, created %d: %s", len(creates), answer.status, answer.body.Created, answer.raw)
			return
		}
		mu.Lock()
		for _, r := range answer.body.Results {
			ids = append(ids, r.Response.Tx.TxID)
		}
		mu.Unlock()
	})
	// Reads beside the creates and the pipeline: the readiness probe, and the signer gauges,
	// which query the database at each scrape.
	for range 5 {
		if got := s.do(t, http.MethodGet, "/readyz", nil); got.status != http.StatusOK {
			t.Errorf("/readyz: %d %s", got.status, got.raw)
		}
		s.metricSums(t)
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	waitFor(t, 60*time.Second, "every create confirmed", func() bool {
		return s.count(t, `SELECT count(*) FROM managed_tx WHERE request_id LIKE 'one-conn-%' AND state = 'CONFIRMED'`) == 30
	})
	served := s.pageCompletions(t, 30)
	for _, id := range ids {
		if served[id] != "CONFIRMED" {
			t.Errorf("the feed served %s as %q, want CONFIRMED", id, served[id])
		}
	}
	sums := s.metricSums(t)
	if got := sums["database_pool_max_connections"]; got != 1 {
		t.Errorf("database_pool_max_connections = %v, want 1", got)
	}
	if got := sums["db_tx_failures_total"]; got != 0 {
		t.Errorf("db_tx_failures_total = %v on one connection, want 0: some path waited for a second connection", got)
	}
	if len(ids) != 30 {
		t.Errorf("%d creates answered, want 30", len(ids))
	}
}
