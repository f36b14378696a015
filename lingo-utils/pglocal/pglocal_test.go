package pglocal_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

func TestStartClusterRunsAndStopsAThrowawayServer(t *testing.T) {
	if _, err := pglocal.FindBinDir(); err != nil {
		pgtest.Unavailable(t, "the PostgreSQL server binaries are needed (apt-get install postgresql)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	if err := pglocal.Probe(ctx, cluster.DSN); err != nil {
		t.Fatalf("probe running cluster: %v", err)
	}
	if err := cluster.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-cluster.Exited():
	default:
		t.Fatal("postmaster still running after Stop")
	}
	if err := cluster.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	probeCtx, cancelProbe := context.WithTimeout(ctx, 2*time.Second)
	defer cancelProbe()
	if err := pglocal.Probe(probeCtx, cluster.DSN); err == nil {
		t.Fatal("server still answers after Stop")
	}
}

func TestFindBinDirHonoursPGBinDir(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	if _, err := pglocal.FindBinDir(); !errors.Is(err, pglocal.ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries for a folder without initdb", err)
	}
}

// PostgreSQL cannot bind port 0: StartCluster picks a free port, and when another process
// takes it first the start moves to another port. That retry keys on the postmaster's own
// bind failure, which a taken fixed port shows here.
func TestStartClusterReportsATakenPortAsABindFailure(t *testing.T) {
	if _, err := pglocal.FindBinDir(); err != nil {
		pgtest.Unavailable(t, "the PostgreSQL server binaries are needed (apt-get install postgresql)", err)
	}
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	port := busy.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{Port: port}); err == nil || !strings.Contains(err.Error(), "could not bind") {
		t.Fatalf("a fixed, taken port: err = %v, want the postmaster's bind failure", err)
	}
}

// A setting only a start can make (shared_preload_libraries) reaches the server: it is why
// a benchmark starts a cluster of its own to count statements.
func TestStartClusterAppliesSettings(t *testing.T) {
	if _, err := pglocal.FindBinDir(); err != nil {
		pgtest.Unavailable(t, "the PostgreSQL server binaries are needed (apt-get install postgresql)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{Durable: true,
		Settings: []string{"shared_preload_libraries=pg_stat_statements", "work_mem=7MB"}})
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer func() { _ = cluster.Stop() }()
	conn, err := pgx.Connect(ctx, cluster.DSN)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(ctx)
	tests := []struct{ setting, want string }{
		{"shared_preload_libraries", "pg_stat_statements"},
		{"work_mem", "7MB"},
		{"fsync", "on"},
	}
	for _, tt := range tests {
		var got string
		if err := conn.QueryRow(ctx, "SELECT current_setting($1)", tt.setting).Scan(&got); err != nil {
			t.Fatalf("%s: %v", tt.setting, err)
		}
		if got != tt.want {
			t.Errorf("%s = %q, want %q", tt.setting, got, tt.want)
		}
	}
}
