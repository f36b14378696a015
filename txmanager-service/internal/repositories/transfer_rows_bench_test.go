package repositories_test

import (
	"context"
	"crypto/rand"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/procstat"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// transferRowsBatch is how many transfers each step writes per statement: a busy signer's
// writer batch and submitter batch are of this order (bench-chain with batches of 100).
const transferRowsBatch = 100

// BenchmarkTransferRows measures what the database does for a transfer's rows from its
// allocation to its final state, step by step, with the statements the pipeline runs and in
// batches of transferRowsBatch for one signer: the allocation (WriteClearAllocations, in a
// writer transaction), the stored signed attempt (MarkSigned) and the final state with its
// held receipt and its completion (Finalize). For each step it reports the server's CPU a
// transfer (the one connection's backend process, read from /proc), the WAL bytes a
// transfer over all three, and the share of the row's updates that were HOT. ns/op is a
// batch's wall time, the building of its inputs included.
//
// make bench-chain answers "how far from the node's own cost", but on a 2-core VM its
// database figure moves by a fifth between runs of one commit. This has no chain, no service
// and one backend: a change of schema or statement shows here in a few seconds, at a few
// percent. The "what if" cases measure a change not made, on their own database: what the
// final update would cost if it were HOT (no index on managed_tx named confirmed_at or
// receipt).
//
// Run with -benchtime 300x or more: the kernel counts a process's CPU in 10 ms ticks.
func BenchmarkTransferRows(b *testing.B) {
	cases := []struct {
		name  string
		alter []string
	}{
		{"as-migrated", nil},
		{"what-if-final-update-is-HOT", []string{"DROP INDEX managed_tx_open_nonce_idx", "DROP INDEX managed_tx_mined_block_idx"}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			pool := testsupport.MigratedPool(b, func(c *pgxpool.Config) { c.MaxConns, c.MinConns = 1, 1 })
			for _, stmt := range tc.alter {
				if _, err := pool.Exec(b.Context(), stmt); err != nil {
					b.Fatalf("%s: %v", stmt, err)
				}
			}
			benchTransferRows(b, pool)
		})
	}
}

// transferSteps is the server's CPU, in seconds, spent in each step.
type transferSteps struct{ allocate, sign, finalize float64 }

func benchTransferRows(b *testing.B, pool *pgxpool.Pool) {
	ctx := b.Context()
	chain := testChain()
	allocations := repositories.NewAllocationRepository(chain)
	submitting := repositories.NewSubmittingRepository(pool, chain)
	finality := repositories.NewReceiptRepository(pool, chain)
	manager := testsupport.TxManager(b, pool)
	signer := common.HexToAddress("0x00000000000000000000000000000000000b3c01").Hex()
	lease := acquireLease(b, pool, signer, "node-bench")
	if _, err := pool.Exec(ctx, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, 0, $2)`,
		signer, int64(lease.Token)); err != nil {
		b.Fatal(err)
	}
	var backend int
	if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatal(err)
	}
	// The one connection's backend: its CPU is the statements' and their commits'.
	_, err := procstat.ProcessSeconds(backend)
	readable := err == nil
	if !readable {
		b.Log("the server's CPU is not readable here (a server on another machine): only time and WAL are reported")
	}
	cpu := func() float64 {
		seconds, _ := procstat.ProcessSeconds(backend)
		return seconds
	}
	walAt := func() string {
		var lsn string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		return lsn
	}
	var spent transferSteps
	step := func(into *float64, run func() error) {
		before := cpu()
		if err := run(); err != nil {
			b.Fatal(err)
		}
		*into += cpu() - before
	}
	walBefore := walAt()
	next := uint64(0)
	for b.Loop() {
		txs := clearBatch(signer, lease, next, transferRowsBatch)
		for i := range txs {
			txs[i].RequestID = uuid.NewString()
			txs[i].Intent.Value = big.NewInt(1_000_000_000_000_000)
		}
		step(&spent.allocate, func() error {
			return manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
				written, err := allocations.WriteClearAllocations(ctx, sess, []services.ClearAllocation{
					{Lease: lease, Txs: txs, ExpectedNext: next, Next: next + transferRowsBatch},
				})
				if err == nil && !written[0] {
					b.Fatal("the batch took the full path: its gate was not clear")
				}
				return err
			})
		})
		next += transferRowsBatch
		attempts := signedAttempts(txs)
		step(&spent.sign, func() error {
			signed, err := submitting.MarkSigned(ctx, lease, attempts, time.Minute)
			if err == nil && len(signed) != len(attempts) {
				b.Fatalf("%d of %d attempts stored", len(signed), len(attempts))
			}
			return err
		})
		step(&spent.finalize, func() error {
			final, err := finality.Finalize(ctx, lease, confirmedWithReceipts(lease, attempts))
			if err == nil && final != len(attempts) {
				b.Fatalf("%d of %d final", final, len(attempts))
			}
			return err
		})
	}
	b.StopTimer()
	transfers := float64(b.N * transferRowsBatch)
	var walBytes float64
	if err := pool.QueryRow(ctx, "SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8", walAt(), walBefore).Scan(&walBytes); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(walBytes/transfers, "WAL-B/transfer")
	// Each transfer's row is updated twice, signed and final: the share of those updates
	// that were HOT (a new version in the same page, no index entry).
	updated, hot := managedTxUpdates(b, pool, int64(2*b.N*transferRowsBatch))
	if updated > 0 {
		b.ReportMetric(100*float64(hot)/float64(updated), "HOT-%-of-updates")
	}
	if readable {
		micros := func(seconds float64) float64 { return seconds * 1e6 / transfers }
		b.ReportMetric(micros(spent.allocate), "allocate-cpu-µs/transfer")
		b.ReportMetric(micros(spent.sign), "sign-cpu-µs/transfer")
		b.ReportMetric(micros(spent.finalize), "finalize-cpu-µs/transfer")
		b.ReportMetric(micros(spent.allocate+spent.sign+spent.finalize), "db-cpu-µs/transfer")
	}
}

// signedAttempts are first attempts for txs as the submitter stores them: a transfer's
// fees, gas and signed bytes (random: the database does not read them).
func signedAttempts(txs []domain.ManagedTx) []pipeline.SignedAttempt {
	attempts := make([]pipeline.SignedAttempt, len(txs))
	for i, tx := range txs {
		raw := make([]byte, 114) // a signed EIP-1559 transfer
		_, _ = rand.Read(raw)
		var hash common.Hash
		_, _ = rand.Read(hash[:])
		attempts[i] = pipeline.SignedAttempt{TxID: tx.ID, Hash: hash, Nonce: tx.Nonce, Kind: pipeline.AttemptOriginal,
			MaxFee: big.NewInt(2_000_000_000), MaxTip: big.NewInt(1_000_000_000), BaseFee: big.NewInt(875_000_000), GasLimit: 21_000, Raw: raw}
	}
	return attempts
}

// confirmedWithReceipts is the finality of the signed attempts, each mined with its receipt
// held in memory until now, as the receipt stage hands it over.
func confirmedWithReceipts(lease domain.Lease, attempts []pipeline.SignedAttempt) []receipts.Finalization {
	block := common.HexToHash("0xb10c")
	finals := make([]receipts.Finalization, len(attempts))
	for i, a := range attempts {
		receipt := services.Receipt{TxHash: a.Hash, Status: 1, BlockNumber: 7, BlockHash: block, TransactionIndex: uint(i), GasUsed: 21_000,
			EffectiveGasPrice: big.NewInt(1_875_000_000)}
		finals[i] = receipts.Finalization{State: domain.StateConfirmed, Tx: receipts.MinedTx{TxID: a.TxID, Signer: lease.Signer, Nonce: a.Nonce,
			BlockNumber: 7, BlockHash: block, Status: 1, Kind: a.Kind, Cost: domain.ReceiptSummary{GasUsed: 21_000, EffectiveGasPrice: receipt.EffectiveGasPrice},
			Held: &receipts.FoundReceipt{TxID: a.TxID, Signer: lease.Signer, Nonce: a.Nonce, Kind: a.Kind, Receipt: receipt}}}
	}
	return finals
}
