package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	txmclient "github.com/bionicotaku/txmanager-service/client"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Wait is answered by the service's long-poll, not by polling: it returns within 500 ms of
// the transaction's completion being positioned in the feed (measured against its
// positioned_at: the start of the finality statement that positioned it).
func TestClientWaitReturnsWhenTheCompletionIsPositioned(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{fastPipeline: true})
	client := newClient(t, txmclient.Config{Endpoints: []string{s.grpcAddr}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var delays []time.Duration
	for i := range 8 {
		created, err := client.Create(ctx, &v1.CreateTxRequest{Signer: devAddress(t, i%2), To: devAddress(t, 5), Value: "1", GasLimit: 21000, RequestId: fmt.Sprintf("wait-%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := client.Wait(ctx, created.GetTx().GetTxId())
		returned := time.Now()
		if err != nil || tx.GetState() != "CONFIRMED" {
			t.Fatalf("Wait: %v %v", tx, err)
		}
		// The final state commits with the completion and its position; the wake reaches the
		// long-poll through the sequencer's look after the finality pass.
		var positionedAt *time.Time
		waitFor(t, 30*time.Second, "the completion positioned", func() bool {
			err := s.pool.QueryRow(ctx, "SELECT positioned_at FROM tx_completions WHERE tx_id = $1", tx.GetTxId()).Scan(&positionedAt)
			return err == nil && positionedAt != nil
		})
		delays = append(delays, returned.Sub(*positionedAt))
	}
	slices.Sort(delays)
	t.Logf("Wait returned relative to the completion being positioned (negative: before it): min %s, median %s, max %s (8 transactions)",
		delays[0].Round(time.Millisecond), delays[len(delays)/2].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond))
	if worst := delays[len(delays)-1]; worst > 500*time.Millisecond {
		t.Fatalf("Wait returned %s after the completion was positioned, want at most 500ms", worst)
	}
}

// watcher runs Client.Watch in the background and records what it delivered.
type watcher struct {
	mu   sync.Mutex
	seen map[string]int
	done chan error
}

func startWatcher(t *testing.T, client *txmclient.Client) (*watcher, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{seen: map[string]int{}, done: make(chan error, 1)}
	go func() {
		w.done <- client.Watch(ctx, "", func(_ context.Context, c *v1.Completion) error {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.seen[c.GetTxId()]++
			return nil
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-w.done; !errors.Is(err, context.Canceled) {
			t.Errorf("Watch ended with %v, want the cancellation", err)
		}
	})
	return w, cancel
}

// waitSeen waits until every id was delivered, then checks each exactly once.
func (w *watcher) waitSeen(t *testing.T, ids []string) {
	t.Helper()
	waitFor(t, 2*time.Minute, fmt.Sprintf("the watcher to see %d completions", len(ids)), func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, id := range ids {
			if w.seen[id] == 0 {
				return false
			}
		}
		return true
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for id, n := range w.seen {
		if n != 1 {
			t.Fatalf("completion %s delivered %d times", id, n)
		}
	}
}

func createVia(t *testing.T, ctx context.Context, client *txmclient.Client, from, n int, prefix string) []string {
	t.Helper()
	var ids []string
	for i := from; i < from+n; i++ {
		resp, err := client.Create(ctx, &v1.CreateTxRequest{Signer: devAddress(t, i%2), To: devAddress(t, 5), Value: fmt.Sprint(i + 1), GasLimit: 21000, RequestId: fmt.Sprintf("%s-%d", prefix, i)})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		ids = append(ids, resp.GetTx().GetTxId())
	}
	return ids
}

// The service restarts (same address, same database and chain) while a watcher is
// connected: the watcher reconnects by itself and delivers every completion, before and
// after, exactly once.
func TestClientWatchResumesAcrossAServiceRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	sim := newTestChain(t, 250*time.Millisecond)
	opts := serviceOptions{chain: sim, signers: 2, fastPipeline: true, dsn: testsupport.MigratedDSN(t)}
	first := startService(t, opts)
	client := newClient(t, txmclient.Config{Endpoints: []string{first.grpcAddr}, Backoff: 50 * time.Millisecond})
	w, _ := startWatcher(t, client)
	ids := createVia(t, ctx, client, 0, 6, "restart")
	w.waitSeen(t, ids)

	stopped := time.Now()
	first.stop(t)
	t.Logf("the service stopped in %s with a watcher connected", time.Since(stopped).Round(time.Millisecond))
	// Created while nobody serves: the watcher must pick these up after the restart.
	restarted := opts
	restarted.configure = func(bc *conf.Bootstrap) {
		bc.Server.GRPC.Addr = first.grpcAddr
		bc.Server.HTTP.Addr = first.httpURL[len("http://"):]
	}
	second := startService(t, restarted)
	ids = append(ids, createVia(t, ctx, client, 6, 6, "restart")...)
	w.waitSeen(t, ids)
	if second.grpcAddr != first.grpcAddr {
		t.Fatalf("restarted on %s, want %s", second.grpcAddr, first.grpcAddr)
	}
}

// Two nodes share a database: a watcher given both follows the first, which stops; it
// moves to the second and delivers every completion exactly once.
func TestClientWatchMovesToAnotherNode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nodes := startCluster(t, 2, conf.RoutingForward)
	client := newClient(t, txmclient.Config{Endpoints: []string{nodes[0].grpcAddr, nodes[1].grpcAddr}, Backoff: 50 * time.Millisecond})
	w, _ := startWatcher(t, client)
	ids := createVia(t, ctx, client, 0, 6, "nodes")
	w.waitSeen(t, ids)
	nodes[0].stop(t)
	second := newClient(t, txmclient.Config{Endpoints: []string{nodes[1].grpcAddr}})
	ids = append(ids, createVia(t, ctx, second, 6, 6, "nodes")...)
	w.waitSeen(t, ids)
}
