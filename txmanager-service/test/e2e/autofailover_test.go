package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// TestFailoverClusterFollowsTheFailovers runs the formation make chaos-db runs on: one
// client DSN reaches whichever node is primary through a planned failover and through the
// primary's death, and nothing written synchronously before either is lost. The killed
// node comes back as the standby.
func TestFailoverClusterFollowsTheFailovers(t *testing.T) {
	if _, err := exec.LookPath("pg_autoctl"); err != nil {
		pgtest.Unavailable(t, "pg_autoctl is needed for the failover harness: apt-get install postgresql-15-auto-failover", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	f, err := StartFailoverCluster(ctx, FailoverOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Stop()
	write := func(value int) {
		t.Helper()
		// The multi-host DSN may first meet the old primary still shutting down.
		var lastErr error
		for range 40 {
			conn, err := pgx.Connect(ctx, f.DSN("postgres"))
			if err == nil {
				_, err = conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS marks (v int)")
				if err == nil {
					_, err = conn.Exec(ctx, "INSERT INTO marks VALUES ($1)", value)
				}
				conn.Close(ctx)
			}
			if err == nil {
				return
			}
			lastErr = err
			time.Sleep(500 * time.Millisecond)
		}
		t.Fatalf("write %d through %s: %v", value, f.DSN("postgres"), lastErr)
	}
	marks := func(n *FailoverNode) int {
		t.Helper()
		conn, err := pgx.Connect(ctx, f.NodeDSN(n, "postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		var count int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM marks").Scan(&count); err != nil {
			t.Fatal(err)
		}
		return count
	}

	first, err := f.Primary(ctx)
	if err != nil {
		t.Fatal(err)
	}
	write(1)
	// The service's watch of the database server reads the formation's replication as
	// synchronous (commits wait for a standby), and reads it again at each new primary.
	replicationAfterNewConnections := func() string {
		t.Helper()
		watch, err := repositories.NewServerWatch(log.DefaultLogger, telemetry.Noop())
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := pgxpool.ParseConfig(f.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		cfg.AfterConnect = watch.AfterConnect
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		if err := pool.Ping(ctx); err != nil {
			t.Fatal(err)
		}
		return watch.Replication().Mode
	}
	if mode := replicationAfterNewConnections(); mode != repositories.ReplicationSynchronous {
		t.Fatalf("the formation's replication read as %s, want synchronous", mode)
	}
	steps := []struct {
		name  string
		fault func(primary *FailoverNode) error
	}{
		{"planned failover", func(*FailoverNode) error { return f.PlannedFailover(ctx) }},
		{"primary killed", func(primary *FailoverNode) error {
			if err := f.Kill(primary); err != nil {
				return err
			}
			if err := f.WaitForNewPrimary(ctx, primary, 3*time.Minute); err != nil {
				return err
			}
			return f.Restart(primary)
		}},
	}
	written := 1
	for _, step := range steps {
		primary, err := f.Primary(ctx)
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if err := step.fault(primary); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if err := f.WaitForNewPrimary(ctx, primary, 3*time.Minute); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		newPrimary, _ := f.Primary(ctx)
		if got := marks(newPrimary); got != written {
			t.Fatalf("%s: the new primary %s holds %d rows, want the %d written before", step.name, newPrimary.Name, got, written)
		}
		written++
		write(written)
		if err := f.WaitHealthy(ctx, 4*time.Minute); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		// A new primary runs asynchronously until its standby is back in the quorum; the
		// watch of a pool that connects afterwards reads it synchronous again.
		mode := ""
		for range 60 {
			if mode = replicationAfterNewConnections(); mode == repositories.ReplicationSynchronous {
				break
			}
			time.Sleep(time.Second)
		}
		if mode != repositories.ReplicationSynchronous {
			t.Fatalf("%s: replication of the healed formation read as %s, want synchronous", step.name, mode)
		}
	}
	if last, _ := f.Primary(ctx); last != first {
		t.Fatalf("after two failovers the primary is %s, want %s again", last.Name, first.Name)
	}
}
