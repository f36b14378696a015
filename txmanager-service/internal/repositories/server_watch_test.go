package repositories_test

import (
	"context"
	"net"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

func hostPort(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
}

// TestServerWatchMovesWhenConnectionsLandOnAnotherServer: the pool reaches PostgreSQL
// through one address (as through a virtual IP or DNS name) whose server is replaced by
// another one; new connections then report a new epoch, and the nonce cache stops serving
// what it cached from the first server. New connections to the same server do not move it.
func TestServerWatchMovesWhenConnectionsLandOnAnotherServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	first := pgtest.AdminDSN(t)
	second, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{})
	if err != nil {
		pgtest.Unavailable(t, "a second PostgreSQL server is started from the installed binaries (PG_BINDIR)", err)
	}
	t.Cleanup(func() { _ = second.Stop() })

	// The pool reaches PostgreSQL through one address, as through a virtual IP.
	proxy, err := e2e.NewForwarder(hostPort(t, first))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	cfg, err := pgxpool.ParseConfig(first)
	if err != nil {
		t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(proxy.Addr())
	portNumber, _ := strconv.Atoi(port)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = host, uint16(portNumber)
	prom, closeProm, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer closeProm()
	metricsPage := httptest.NewServer(prom.Handler)
	defer metricsPage.Close()
	metrics, err := telemetry.NewMetrics(prom.Provider)
	if err != nil {
		t.Fatal(err)
	}
	watch, err := repositories.NewServerWatch(log.DefaultLogger, metrics)
	if err != nil {
		t.Fatal(err)
	}
	cfg.AfterConnect = watch.AfterConnect
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cache := services.NewNonceCache(watch)
	cache.Put("0xsigner", 7, time.Now(), cache.Epoch())

	steps := []struct {
		name      string
		target    string
		wantEpoch uint64
		wantCache bool
	}{
		{"first connections", hostPort(t, first), 0, true},
		{"new connections to the same server", hostPort(t, first), 0, true},
		{"the address now reaches another server", hostPort(t, second.DSN), 1, false},
		{"and back to the first (a switchback)", hostPort(t, first), 2, false},
	}
	for _, step := range steps {
		proxy.SetTarget(step.target)
		pool.Reset() // every later acquire opens a new connection
		if err := pool.Ping(ctx); err != nil {
			t.Fatalf("%s: ping: %v", step.name, err)
		}
		if got := watch.ServerEpoch(); got != step.wantEpoch {
			t.Fatalf("%s: server epoch %d, want %d", step.name, got, step.wantEpoch)
		}
		got, err := e2e.ScrapeCounter(ctx, metricsPage.URL, telemetry.DatabaseServerChanges)
		if err != nil || got != float64(step.wantEpoch) {
			t.Fatalf("%s: %s = %v (%v), want %d", step.name, telemetry.DatabaseServerChanges, got, err, step.wantEpoch)
		}
		_, _, cached := cache.Get("0xsigner")
		if cached != step.wantCache {
			t.Fatalf("%s: cache entry served %t, want %t", step.name, cached, step.wantCache)
		}
		// The signer's next batch caches again in the epoch it began in.
		cache.Put("0xsigner", 7, time.Now(), cache.Epoch())
	}
	// A batch that began before the server changed records nothing after it.
	before := cache.Epoch()
	proxy.SetTarget(hostPort(t, second.DSN))
	pool.Reset()
	if err := pool.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	cache.Put("0xsigner", 9, time.Now(), before)
	if _, _, cached := cache.Get("0xsigner"); cached {
		t.Fatal("a batch from the earlier server epoch was cached")
	}
}
