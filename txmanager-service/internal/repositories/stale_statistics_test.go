package repositories_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The batch writes are planned well even when the statistics say there is nothing to
// write: ANALYZE ran while every row of the signer was final, then a burst opened thousands.
// Each statement is planned as production plans it (a custom plan, the batch's length
// known) and run under EXPLAIN ANALYZE in a transaction that is rolled back. It must read
// its input once and write the whole batch. With a filter on managed_tx alone, the planner
// expected one open row, scanned managed_tx first and read the input again for each of
// the 3,000 open rows (the finality statement: 0.8 s here, up to 6.4 s in a bench run).
func TestBatchWritesDoNotTrustStaleStatistics(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const (
		signer = "0x00000000000000000000000000000000000057a1"
		rows   = 30_000
		open   = 3_000 // the rows the burst opened: nonces from rows-open up
		batch  = 732
	)
	lease := acquireLease(t, pool, signer, "node-a")
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, tx_hash, state, sub_state,
			receipt, block_number, block_hash, confirmed_at, fencing_token)
		SELECT 1337, gen_random_uuid(), $1, '\x00', g, '{"value":"1"}', 'h' || g, 'CONFIRMED', 'MINED',
			'{"status":"0x1"}', g / 100, 'b' || (g / 100), now(), $2
		FROM generate_series(0, $3 - 1) g`, signer, int64(lease.Token), rows); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE managed_tx"); err != nil {
		t.Fatal(err)
	}
	var ids, hashes, blockHashes []string
	var nonces []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(tx_id::text ORDER BY nonce), array_agg(tx_hash ORDER BY nonce),
			array_agg(block_hash ORDER BY nonce), array_agg(nonce ORDER BY nonce)
		FROM managed_tx WHERE signer = $1 AND nonce >= $2 AND nonce < $2 + $3`, signer, rows-open, batch).
		Scan(&ids, &hashes, &blockHashes, &nonces); err != nil {
		t.Fatal(err)
	}
	repeat := func(s string) []string {
		out := make([]string, batch)
		for i := range out {
			out[i] = s
		}
		return out
	}
	fresh := func(prefix string) []string {
		out := make([]string, batch)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d", prefix, nonces[i])
		}
		return out
	}
	gas, raw := make([]int64, batch), make([][]byte, batch)
	for i := range gas {
		gas[i], raw[i] = 21_000, []byte{0x02}
	}
	chain, node, token := int64(1337), lease.Owner, int64(lease.Token)
	const (
		allocated = "state = 'ALLOCATED', sub_state = NULL, tx_hash = NULL, receipt = NULL, block_number = NULL, block_hash = NULL"
		unmined   = "state = 'TRACKING', sub_state = 'SIGNED', receipt = NULL, block_number = NULL, block_hash = NULL"
		mined     = "state = 'TRACKING', sub_state = 'MINED'"
	)
	tests := []struct {
		name  string
		opens string // how the burst left the open rows
		call  func(q *sqlcdb.Queries) error
	}{
		{"MarkSigned", allocated, func(q *sqlcdb.Queries) error {
			_, err := q.MarkSigned(ctx, sqlcdb.MarkSignedParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, TxHashes: hashes, Nonces: nonces, MaxFees: repeat("2"), MaxTips: repeat("1"), GasLimits: gas, RawTxs: raw, ResubmitAfterSeconds: 30})
			return err
		}},
		{"RecordBroadcasts", unmined, func(q *sqlcdb.Queries) error {
			_, err := q.RecordBroadcasts(ctx, sqlcdb.RecordBroadcastsParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, TxHashes: hashes, SubStates: repeat("SUBMITTED"), LastErrors: repeat("")})
			return err
		}},
		{"RecordReceipts", unmined, func(q *sqlcdb.Queries) error {
			_, err := q.RecordReceipts(ctx, sqlcdb.RecordReceiptsParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, TxHashes: hashes, Receipts: repeat(`{"status":"0x1"}`), BlockNumbers: nonces, BlockHashes: blockHashes})
			return err
		}},
		{"RecordReplacements", unmined, func(q *sqlcdb.Queries) error {
			_, err := q.RecordReplacements(ctx, sqlcdb.RecordReplacementsParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, Replaced: hashes, TxHashes: fresh("r"), Nonces: nonces, Kinds: repeat("FEE_BUMP"), MaxFees: repeat("4"), MaxTips: repeat("2"), GasLimits: gas, RawTxs: raw})
			return err
		}},
		{"RevertReorged", mined, func(q *sqlcdb.Queries) error {
			_, err := q.RevertReorged(ctx, sqlcdb.RevertReorgedParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, BlockHashes: blockHashes})
			return err
		}},
		{"FinalizeTxs", mined, func(q *sqlcdb.Queries) error {
			_, err := q.FinalizeTxs(ctx, sqlcdb.FinalizeTxsParams{ChainID: chain, Signer: signer, NodeID: node, FencingToken: token,
				TxIds: ids, BlockHashes: blockHashes, States: repeat("CONFIRMED"), SubStates: repeat(""), Receipts: repeat(""), BlockNumbers: nonces, TxHashes: repeat("")})
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var statement capturedStatement
			if err := tt.call(sqlcdb.New(&statement)); !errors.Is(err, errCaptured) {
				t.Fatalf("capture the statement: %v", err)
			}
			plan := explainAnalyzeInBurst(t, pool, "UPDATE managed_tx SET "+tt.opens+", confirmed_at = NULL WHERE signer = '"+signer+"' AND nonce >= "+fmt.Sprint(rows-open), statement)
			if loops := plan.loopsOf("ProjectSet"); len(loops) == 0 || loops[0] != 1 {
				t.Errorf("the input was read %v times, want once:\n%s", loops, plan.raw)
			}
			if got := plan.rowsOf("ModifyTable", "managed_tx"); got != batch {
				t.Errorf("managed_tx rows written %d, want %d (the whole batch):\n%s", got, batch, plan.raw)
			}
		})
	}
}

var errCaptured = errors.New("statement captured, not run")

// capturedStatement is a sqlcdb.DBTX that keeps the one statement a query method sends,
// with its arguments, instead of running it.
type capturedStatement struct {
	sql  string
	args []any
}

func (c *capturedStatement) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	c.sql, c.args = sql, args
	return pgconn.CommandTag{}, errCaptured
}

func (c *capturedStatement) Query(_ context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.sql, c.args = sql, args
	return nil, errCaptured
}

func (c *capturedStatement) QueryRow(_ context.Context, sql string, args ...any) pgx.Row {
	c.sql, c.args = sql, args
	return capturedRow{}
}

type capturedRow struct{}

func (capturedRow) Scan(...any) error { return errCaptured }

// explainAnalyzeInBurst runs burst (an update that opens rows without analyzing them) and
// then statement under EXPLAIN ANALYZE, in one transaction it rolls back. The statement
// goes as an unnamed one (exec mode), so it is planned with its arguments known: the
// custom plan every execution gets behind a transaction pooler, and the first five on each
// pooled connection get otherwise.
func explainAnalyzeInBurst(t *testing.T, pool interface {
	Begin(context.Context) (pgx.Tx, error)
}, burst string, statement capturedStatement) explainedPlan {
	t.Helper()
	ctx := t.Context()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, burst); err != nil {
		t.Fatalf("open the burst's rows: %v", err)
	}
	var raw []byte
	args := append([]any{pgx.QueryExecModeExec}, statement.args...)
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+statement.sql, args...).Scan(&raw); err != nil {
		t.Fatalf("explain: %v", err)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("read the plan: %v (%d plans)", err, len(plans))
	}
	return explainedPlan{root: plans[0].Plan, raw: string(raw)}
}

type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	ActualRows   float64    `json:"Actual Rows"`
	ActualLoops  float64    `json:"Actual Loops"`
	Plans        []planNode `json:"Plans"`
}

type explainedPlan struct {
	root planNode
	raw  string
}

func (p explainedPlan) walk(visit func(planNode)) {
	var walk func(planNode)
	walk = func(n planNode) {
		visit(n)
		for _, child := range n.Plans {
			walk(child)
		}
	}
	walk(p.root)
}

// loopsOf is how many times each node of the type ran.
func (p explainedPlan) loopsOf(nodeType string) []float64 {
	var loops []float64
	p.walk(func(n planNode) {
		if n.NodeType == nodeType {
			loops = append(loops, n.ActualLoops)
		}
	})
	return loops
}

// rowsOf is the rows the node of the type on relation returned, over all its loops.
func (p explainedPlan) rowsOf(nodeType, relation string) int {
	rows := 0
	p.walk(func(n planNode) {
		if n.NodeType == nodeType && n.RelationName == relation {
			rows += int(n.ActualRows * n.ActualLoops)
		}
	})
	return rows
}
