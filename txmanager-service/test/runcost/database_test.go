package runcost

import (
	"strings"
	"testing"
)

func TestTableCounts(t *testing.T) {
	t.Parallel()
	before := tableCounts{inserted: 10, updated: 20, hotUpdated: 5, deleted: 1}
	after := tableCounts{inserted: 13, updated: 27, hotUpdated: 9, deleted: 2}
	d := after.minus(before)
	tests := []struct {
		name      string
		got, want int64
	}{
		{"inserted", d.inserted, 3},
		{"updated", d.updated, 7},
		{"HOT", d.hotUpdated, 4},
		{"deleted", d.deleted, 1},
		{"written: inserts and updates", d.written(), 10},
		{"dead: updates and deletes", d.dead(), 8},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestSnapshotMinusKeepsTablesSeenOnlyAfter(t *testing.T) {
	t.Parallel()
	before := DatabaseSnapshot{perTable: map[string]tableCounts{"managed_tx": {inserted: 1}}, walBytes: 1000, walRecords: 10}
	after := DatabaseSnapshot{perTable: map[string]tableCounts{"managed_tx": {inserted: 4}, "tx_attempt": {inserted: 3}}, walBytes: 4000, walRecords: 40, walFullPages: 2}
	d := after.Minus(before)
	if d.perTable["managed_tx"].inserted != 3 || d.perTable["tx_attempt"].inserted != 3 {
		t.Errorf("per table %+v, want 3 inserted in each", d.perTable)
	}
	if d.walBytes != 3000 || d.walRecords != 30 || d.walFullPages != 2 {
		t.Errorf("WAL %d bytes, %d records, %d full pages; want 3000, 30, 2", d.walBytes, d.walRecords, d.walFullPages)
	}
}

func TestPrintDatabaseCostIsPerTransfer(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	PrintDatabaseCost(&out, DatabaseCost{
		Transfers: 100,
		Delta: DatabaseSnapshot{tables: tableCounts{inserted: 300, updated: 500, hotUpdated: 100}, walBytes: 780_000, walRecords: 5300,
			perTable: map[string]tableCounts{"managed_tx": {inserted: 100, updated: 400}, "idle": {}}},
		Statements: Statements{calls: 190, rows: 500, totalMillis: 50, planMillis: 30,
			top: []statement{{query: "-- name: MarkSigned :one\nWITH lease AS (\n  SELECT 1)", calls: 10, rows: 10, totalMillis: 20, walBytesOfStmt: 1000}}},
	})
	text := out.String()
	for _, want := range []string{
		"statements 1.90", "planning 0.300 ms", "row versions written 8.00", "dead row versions 5.00", "WAL 7800 bytes", "managed_tx +1.00 ~4.00",
		"-- name: MarkSigned :one WITH lease AS ( SELECT 1)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "idle") {
		t.Errorf("a table the run did not write is listed:\n%s", text)
	}
}

func TestOneLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		query string
		width int
		want  string
	}{
		{"SELECT 1", 20, "SELECT 1"},
		{"SELECT\n  a,\n\tb FROM t", 40, "SELECT a, b FROM t"},
		{"SELECT abcdefghij", 10, "SELECT ..."},
	}
	for _, tt := range tests {
		if got := oneLine(tt.query, tt.width); got != tt.want {
			t.Errorf("oneLine(%q, %d) = %q, want %q", tt.query, tt.width, got, tt.want)
		}
	}
}

func TestPerTransferDividesByTheTransfers(t *testing.T) {
	t.Parallel()
	c := DatabaseCost{Transfers: 100, Delta: DatabaseSnapshot{tables: tableCounts{inserted: 300, updated: 220, deleted: 10}, walBytes: 360_000},
		Statements: Statements{calls: 17}}
	got := c.PerTransfer()
	want := PerTransferCost{Statements: 0.17, RowVersions: 5.2, DeadRowVersions: 2.3, WALBytes: 3600}
	if got != want {
		t.Errorf("PerTransfer() = %+v, want %+v", got, want)
	}
}
