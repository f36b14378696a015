package txmanager_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
