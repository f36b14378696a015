package pglocal_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

func TestStartClusterRunsAndStopsAThrowawayServer(t *testing.T) {
	if _, err := pglocal.FindBinDir(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL server binaries are required in CI: %v", err)
		}
		t.Skipf("no PostgreSQL binaries here: %v", err)
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
