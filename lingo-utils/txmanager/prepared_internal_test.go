package txmanager

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

// The record of cached statements: a connection's statements count as cached once
// recorded, a record that would pass pgx's cache capacity starts again (pgx has dropped some
// of them by then), and connections the pool closed are dropped from the record.
func TestPreparedStatementsRecord(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	connect := func() *pgx.Conn {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(ctx) })
		return conn
	}
	queries := func(sqls ...string) []*pgx.QueuedQuery {
		out := make([]*pgx.QueuedQuery, len(sqls))
		for i, sql := range sqls {
			out[i] = &pgx.QueuedQuery{SQL: sql}
		}
		return out
	}
	p := &preparedStatements{mode: pgx.QueryExecModeCacheStatement, capacity: 3, pruneAbove: 1}
	a, b := connect(), connect()
	if !p.parsedFirst(a, queries("SELECT 1")) {
		t.Fatal("a connection never recorded: taken as having the statement cached")
	}
	p.record(a, queries("SELECT 1", "SELECT 2"))
	for _, tc := range []struct {
		conn *pgx.Conn
		sqls []string
		want bool
	}{
		{a, []string{"SELECT 1"}, false},
		{a, []string{"SELECT 1", "SELECT 2"}, false},
		{a, []string{"SELECT 1", "SELECT 3"}, true},
		{b, []string{"SELECT 1"}, true},
	} {
		if got := p.parsedFirst(tc.conn, queries(tc.sqls...)); got != tc.want {
			t.Errorf("parsedFirst(%v) = %t, want %t", tc.sqls, got, tc.want)
		}
	}
	p.record(a, queries("SELECT 3", "SELECT 4")) // 4 > capacity 3: the record starts again
	if p.parsedFirst(a, queries("SELECT 1")) != true || p.parsedFirst(a, queries("SELECT 4")) != false {
		t.Error("a record past pgx's capacity was kept")
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	p.record(b, queries("SELECT 1")) // a second connection: past pruneAbove, closed ones go
	if _, kept := p.conns.Load(a); kept {
		t.Error("a closed connection stayed in the record")
	}
	if n := p.count.Load(); n != 1 {
		t.Errorf("%d connections counted, want 1", n)
	}
	// A statement that failed is dropped from pgx's cache, and from the record.
	p.record(b, queries("SELECT 5", "SELECT 6"))
	p.forget(b, []string{"SELECT 5"})
	if !p.parsedFirst(b, queries("SELECT 5")) || p.parsedFirst(b, queries("SELECT 6")) {
		t.Error("forget dropped the wrong statements")
	}
	p.forgetConn(b)
	if !p.parsedFirst(b, queries("SELECT 6")) || p.count.Load() != 0 {
		t.Error("forgetConn kept the connection's record")
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		if (&preparedStatements{mode: mode}).parsedFirst(b, queries("SELECT 9")) {
			t.Errorf("%s parses in the pipeline's order, taken as parsing first", mode)
		}
	}
	if !(&preparedStatements{mode: pgx.QueryExecModeDescribeExec}).parsedFirst(b, queries("SELECT 1")) {
		t.Error("describe-exec describes every statement ahead of the batch, taken as not")
	}
}
