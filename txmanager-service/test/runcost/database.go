package runcost

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresSettings are what the run's own cluster starts with beyond a durable server's
// defaults: pg_stat_statements must be preloaded, so the tool cannot use a shared server.
var PostgresSettings = []string{
	"shared_preload_libraries=pg_stat_statements",
	"pg_stat_statements.track=top",
	"pg_stat_statements.max=1000",
	// Planning is counted apart from execution: a batch statement's custom plan is made
	// afresh for every call, and that time is not in total_exec_time.
	"pg_stat_statements.track_planning=on",
	"track_io_timing=off",
}

// tableCounts sums pg_stat_user_tables over the run's database. Every insert and every
// update writes a new row version (heap tuple); every update and every delete leaves a dead
// one for vacuum. An update that is HOT writes no index entry.
type tableCounts struct {
	inserted, updated, hotUpdated, deleted int64
}

// written is the row versions a run wrote: inserts plus updates.
func (c tableCounts) written() int64 { return c.inserted + c.updated }

// dead is the dead row versions a run left behind: updates plus deletes.
func (c tableCounts) dead() int64 { return c.updated + c.deleted }

func (c tableCounts) minus(o tableCounts) tableCounts {
	return tableCounts{c.inserted - o.inserted, c.updated - o.updated, c.hotUpdated - o.hotUpdated, c.deleted - o.deleted}
}

// DatabaseSnapshot is the database's counters at one moment.
type DatabaseSnapshot struct {
	tables tableCounts
	// perTable is each table's counts, for finding which one a change should go after.
	perTable map[string]tableCounts
	// walBytes is the WAL position (pg_current_wal_lsn) in bytes: the cluster is the run's
	// own, so its difference is the WAL the run wrote.
	walBytes int64
	// walRecords and walFullPages are pg_stat_wal's records and full-page images.
	walRecords, walFullPages int64
}

// Minus is what changed from o to s.
func (s DatabaseSnapshot) Minus(o DatabaseSnapshot) DatabaseSnapshot {
	d := DatabaseSnapshot{tables: s.tables.minus(o.tables), perTable: map[string]tableCounts{},
		walBytes: s.walBytes - o.walBytes, walRecords: s.walRecords - o.walRecords, walFullPages: s.walFullPages - o.walFullPages}
	for name, c := range s.perTable {
		d.perTable[name] = c.minus(o.perTable[name])
	}
	return d
}

// StartDatabaseCount prepares conn's database for counting: pg_stat_statements installed and
// reset, and conn's own statements left out of the count.
func StartDatabaseCount(ctx context.Context, conn *pgx.Conn) (DatabaseSnapshot, error) {
	for _, sql := range []string{
		"CREATE EXTENSION IF NOT EXISTS pg_stat_statements",
		// This connection's progress queries are the tool's, not the service's.
		"SET pg_stat_statements.track = 'none'",
		"SELECT pg_stat_statements_reset()",
		"SELECT pg_stat_reset_shared('wal')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return DatabaseSnapshot{}, fmt.Errorf("prepare the database count (%s): %w", sql, err)
		}
	}
	return TakeDatabaseSnapshot(ctx, conn)
}

// WaitForOtherBackends waits until conn is the only client of its database, at most
// timeout. A server process flushes its table counters when it exits, which is after its
// client closed the connection: a snapshot taken before would miss the last of them.
func WaitForOtherBackends(ctx context.Context, conn *pgx.Conn, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var others int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&others)
		switch {
		case err != nil:
			return fmt.Errorf("count the database's other clients: %w", err)
		case others == 0:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("%d other clients of the database still connected after %s", others, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TakeDatabaseSnapshot reads conn's database's table counters and the server's WAL counters.
func TakeDatabaseSnapshot(ctx context.Context, conn *pgx.Conn) (DatabaseSnapshot, error) {
	// Counters other backends have not flushed yet are not visible; the snapshot after the
	// run is taken once the service has stopped, whose backends flush theirs on exit.
	s := DatabaseSnapshot{perTable: map[string]tableCounts{}}
	rows, err := conn.Query(ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del FROM pg_stat_user_tables`)
	if err != nil {
		return s, fmt.Errorf("table counters: %w", err)
	}
	for rows.Next() {
		var name string
		var c tableCounts
		if err := rows.Scan(&name, &c.inserted, &c.updated, &c.hotUpdated, &c.deleted); err != nil {
			rows.Close()
			return s, err
		}
		s.perTable[name] = c
		s.tables.inserted += c.inserted
		s.tables.updated += c.updated
		s.tables.hotUpdated += c.hotUpdated
		s.tables.deleted += c.deleted
	}
	if err := rows.Err(); err != nil {
		return s, err
	}
	err = conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, wal_records, wal_fpi FROM pg_stat_wal`).
		Scan(&s.walBytes, &s.walRecords, &s.walFullPages)
	if err != nil {
		return s, fmt.Errorf("WAL counters: %w", err)
	}
	return s, nil
}

// statement is one pg_stat_statements entry of the run.
type statement struct {
	query          string
	calls, rows    int64
	totalMillis    float64
	planMillis     float64
	walBytesOfStmt int64
	// buffers is the shared buffers the statement visited (hit or read): the work an index
	// scan does over row versions it must skip shows here.
	buffers int64
}

// Statements is the service's statements in the run: their total and the costliest.
type Statements struct {
	calls, rows int64
	totalMillis float64
	planMillis  float64
	top         []statement
}

// CountStatements sums pg_stat_statements over conn's database since StartDatabaseCount and lists
// the topN costliest statements by execution and planning time.
func CountStatements(ctx context.Context, conn *pgx.Conn, topN int) (Statements, error) {
	var c Statements
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint, coalesce(sum(rows), 0)::bigint, coalesce(sum(total_exec_time), 0), coalesce(sum(total_plan_time), 0)
		FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&c.calls, &c.rows, &c.totalMillis, &c.planMillis)
	if err != nil {
		return c, fmt.Errorf("statement totals: %w", err)
	}
	rows, err := conn.Query(ctx, `SELECT query, calls, rows, total_exec_time, total_plan_time, wal_bytes::bigint, shared_blks_hit + shared_blks_read FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time + total_plan_time DESC LIMIT $1`, topN)
	if err != nil {
		return c, fmt.Errorf("top statements: %w", err)
	}
	c.top, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (statement, error) {
		var s statement
		err := row.Scan(&s.query, &s.calls, &s.rows, &s.totalMillis, &s.planMillis, &s.walBytesOfStmt, &s.buffers)
		return s, err
	})
	return c, err
}

// DatabaseCost is what the database did for a run's confirmed transfers.
type DatabaseCost struct {
	Transfers  int
	Delta      DatabaseSnapshot
	Statements Statements
}

// PerTransferCost is a run's database cost per transfer, for benchmark metrics.
type PerTransferCost struct {
	Statements, RowVersions, DeadRowVersions, WALBytes float64
}

// PerTransfer divides the run's counts by its transfers.
func (c DatabaseCost) PerTransfer() PerTransferCost {
	n := float64(max(c.Transfers, 1))
	return PerTransferCost{Statements: float64(c.Statements.calls) / n, RowVersions: float64(c.Delta.tables.written()) / n,
		DeadRowVersions: float64(c.Delta.tables.dead()) / n, WALBytes: float64(c.Delta.walBytes) / n}
}

// PrintDatabaseCost writes the per-transfer table and the costliest statements.
func PrintDatabaseCost(w io.Writer, c DatabaseCost) {
	n := float64(max(c.Transfers, 1))
	d := c.Delta
	fmt.Fprintf(w, "    database per confirmed transfer (%d transfers):\n", c.Transfers)
	fmt.Fprintf(w, "      statements %.2f (rows returned or affected %.2f, execution %.3f ms, planning %.3f ms)\n", float64(c.Statements.calls)/n, float64(c.Statements.rows)/n, c.Statements.totalMillis/n, c.Statements.planMillis/n)
	fmt.Fprintf(w, "      row versions written %.2f (inserted %.2f, updated %.2f of which HOT %.2f); dead row versions %.2f (updated + deleted %.2f)\n",
		float64(d.tables.written())/n, float64(d.tables.inserted)/n, float64(d.tables.updated)/n, float64(d.tables.hotUpdated)/n,
		float64(d.tables.dead())/n, float64(d.tables.deleted)/n)
	fmt.Fprintf(w, "      WAL %.0f bytes (%.2f records, %.3f full-page images)\n", float64(d.walBytes)/n, float64(d.walRecords)/n, float64(d.walFullPages)/n)
	var parts []string
	for name, t := range d.perTable {
		if t.written()+t.deleted == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s +%.2f ~%.2f(HOT %.2f) -%.2f", name, float64(t.inserted)/n, float64(t.updated)/n, float64(t.hotUpdated)/n, float64(t.deleted)/n))
	}
	slices.Sort(parts)
	fmt.Fprintf(w, "      by table (+inserted ~updated -deleted): %s\n", strings.Join(parts, "; "))
	fmt.Fprintf(w, "    top statements by total execution and planning time:\n")
	fmt.Fprintf(w, "      %9s %8s %8s %9s %9s %9s %10s  %s\n", "total ms", "plan ms", "calls/tx", "rows/call", "ms/call", "WAL B/tx", "bufs/call", "query")
	for _, s := range c.Statements.top {
		rowsPerCall := 0.0
		if s.calls > 0 {
			rowsPerCall = float64(s.rows) / float64(s.calls)
		}
		fmt.Fprintf(w, "      %9.0f %8.0f %8.3f %9.1f %9.3f %9.0f %10.0f  %s\n", s.totalMillis, s.planMillis, float64(s.calls)/n, rowsPerCall,
			s.totalMillis/float64(max(s.calls, 1)), float64(s.walBytesOfStmt)/n, float64(s.buffers)/float64(max(s.calls, 1)), oneLine(s.query, 110))
	}
}

// oneLine is query on one line, cut to at most width characters.
func oneLine(query string, width int) string {
	q := strings.Join(strings.Fields(query), " ")
	if len(q) > width {
		q = q[:width-3] + "..."
	}
	return q
}
