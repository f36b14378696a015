package repositories_test

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The writes that commit without waiting for the WAL flush turn it off for their own
// transaction only: the pooled connection they ran on goes back with the server's setting,
// so the next statement on it (a create's allocation, a MarkSigned) waits for its flush.
func TestRelaxedCommitStaysInItsTransaction(t *testing.T) {
	t.Parallel()
	// One connection, so every statement below runs on the one the relaxed write used.
	pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	attempts := repositories.NewAttemptRepository(pool, testChain())
	found := repositories.NewReceiptRepository(pool, testChain())
	ctx := context.Background()
	lease := domain.Lease{Signer: "0x00000000000000000000000000000000000000aa", Owner: "node-a", Token: 1}
	var before string
	if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&before); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		write func() error
	}{
		{"broadcast outcomes", func() error {
			return attempts.RecordBroadcasts(ctx, lease, []pipeline.BroadcastOutcome{{TxID: uuid.New(), SubState: domain.SubStateSubmitted}})
		}},
		{"receipts", func() error {
			_, err := found.RecordReceipts(ctx, lease, []receipts.FoundReceipt{{TxID: uuid.New(), Signer: lease.Signer, Kind: pipeline.AttemptOriginal,
				Receipt: services.Receipt{TxHash: common.HexToHash("0x01"), Status: 1, BlockNumber: 1, BlockHash: common.HexToHash("0x02")}}})
			return err
		}},
	}
	for _, tt := range tests {
		// The lease is not held, so the write is fenced: the statement ran all the same.
		if err := tt.write(); err == nil {
			t.Fatalf("%s: written without a lease", tt.name)
		}
		var after string
		if err := pool.QueryRow(ctx, "SHOW synchronous_commit").Scan(&after); err != nil {
			t.Fatal(err)
		}
		if after != before {
			t.Fatalf("after %s the connection's synchronous_commit is %q, want the server's %q", tt.name, after, before)
		}
	}
	// Inside the statement the setting is off: the same expression, read back.
	var inside string
	if err := pool.QueryRow(ctx, `WITH relaxed_commit AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
		SELECT current_setting('synchronous_commit') FROM relaxed_commit`).Scan(&inside); err != nil || inside != "off" {
		t.Fatalf("inside the statement synchronous_commit is %q (%v), want off", inside, err)
	}
}
