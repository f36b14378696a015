package txmanager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
)

// A transaction that runs out of time holds no lock once WithinTx has returned: with the
// pool set by CancelStatementsOnTimeout the server cancels the running statement and the
// rollback runs on the same connection. With pgx's default the socket was closed, and the
// server kept the statement, and the row lock, until the sleep ended.
func TestATimedOutTransactionHoldsNoLockAfterItReturns(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{}, func(cfg *pgxpool.Config) { txmanager.CancelStatementsOnTimeout(cfg, 0) })
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		opts txmanager.TxOptions
	}{
		{"the transaction's timeout", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			txmanager.DefaultOptions().WithTimeout(200 * time.Millisecond)},
		{"the caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		},
			txmanager.DefaultOptions().WithTimeout(time.Minute)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			err := f.manager.WithinTx(ctx, tc.opts, func(ctx context.Context, s txmanager.Session) error {
				if _, err := s.DB().Exec(ctx, "UPDATE account SET balance = balance + 1 WHERE id = 1"); err != nil {
					return err
				}
				_, err := s.DB().Exec(ctx, "SELECT pg_sleep(5)")
				return err
			})
			if !errors.Is(err, txmanager.ErrTxTimeout) {
				t.Fatalf("err = %v, want a timeout", err)
			}
			// Another session wants the same row at once, without waiting: the timed-out
			// transaction must have ended by now.
			conn, err := f.pool.Acquire(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			if _, err := conn.Exec(context.Background(), "SELECT id FROM account WHERE id = 1 FOR UPDATE NOWAIT"); err != nil {
				t.Fatalf("the row the timed-out transaction wrote, right after WithinTx returned: %v, want it free", err)
			}
			if got := f.count(t, "SELECT balance FROM account WHERE id = 1"); got != 100 {
				t.Fatalf("balance %d, want 100: the timed-out update was kept", got)
			}
		})
	}
}

// A COMMIT that waits for a synchronous standby when its deadline passes: asked to cancel,
// the server ends the wait and commits on the primary alone, answering success with a
// warning. A failover may lose that commit, so WithinTx reports its outcome unknown rather
// than success. Here the standby is one the server is told to wait for and that never
// connects.
func TestACommitCutShortOfTheStandbyIsAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{Settings: []string{"synchronous_commit=on", "synchronous_standby_names=never_connects"}})
	if err != nil {
		pgtest.Unavailable(t, "this test starts a PostgreSQL cluster of its own from the installed server binaries (apt-get install postgresql)", err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	pool := pgtest.NewPool(t, cluster.DSN, func(cfg *pgxpool.Config) { txmanager.CancelStatementsOnTimeout(cfg, 0) })
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "BEGIN; SET LOCAL synchronous_commit = off; CREATE TABLE payout (id int PRIMARY KEY); COMMIT"); err != nil {
		t.Fatal(err)
	}
	err = component.Manager.WithinTx(ctx, txmanager.DefaultOptions().WithTimeout(300*time.Millisecond), func(ctx context.Context, s txmanager.Session) error {
		_, err := s.DB().Exec(ctx, "INSERT INTO payout VALUES (1)")
		return err
	})
	if !errors.Is(err, txmanager.ErrCommitOutcomeUnknown) {
		t.Fatalf("a COMMIT whose wait for the standby was cancelled: %v, want its outcome unknown", err)
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM payout").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows on the primary: %d (%v); want the commit visible there, which is why success would mislead", n, err)
	}
}
