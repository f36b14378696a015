package repositories

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Attempts and completions have no foreign key to their transaction (migration 0016): the
// per-row check cost a quarter of the signing and finality statements. Each statement that
// writes one must take its rows from the managed_tx rows it updated or inserted itself
// (RETURNING), which exist and stay locked until its commit. These tests hold every query to
// that, as the fencing tests hold every write to the lease.

// childTables are the tables whose rows belong to one managed_tx row each.
var childTables = []string{"tx_attempt", "tx_completions"}

// An intent that ended without a nonce has its approval's row (updated by the statement, and
// so locked until its commit) as the parent of its completion.
var parentWrite = regexp.MustCompile(`^(?:update managed_tx|insert into managed_tx|update tx_approval)\b.*\breturning\b`)

// firstSource is the first relation a SELECT reads: the one each of its rows comes from,
// whatever it joins to it.
var firstSource = regexp.MustCompile(`\bselect\b.*?\bfrom (\w+)\b`)

// checkChildRows returns what is wrong with one query's inserts into a child table.
func checkChildRows(q namedQuery) []string {
	bodies := cteBodies(q.sql)
	// parents: CTEs whose rows are managed_tx rows the statement wrote, directly (RETURNING)
	// or selected from such a CTE.
	parents := map[string]bool{}
	for changed := true; changed; {
		changed = false
		for name, body := range bodies {
			if parents[name] {
				continue
			}
			if parentWrite.MatchString(body) || (strings.HasPrefix(body, "select ") && readsFrom(body, parents)) {
				parents[name], changed = true, true
			}
		}
	}
	var problems []string
	for _, m := range writeTargets(q.sql) {
		table := q.sql[m[2]:m[3]]
		if !strings.HasPrefix(q.sql[m[0]:], "insert into") || !slices.Contains(childTables, table) {
			continue
		}
		if !readsFrom(enclosing(q.sql, m[0]), parents) {
			problems = append(problems, "inserts into "+table+" from rows that are not the managed_tx rows the statement itself updated or inserted (RETURNING)")
		}
	}
	return problems
}

// readsFrom: the first SELECT in sql takes its rows from one of sources.
func readsFrom(sql string, sources map[string]bool) bool {
	m := firstSource.FindStringSubmatch(sql)
	return m != nil && sources[m[1]]
}

func TestChildRowsComeFromTheRowsTheStatementWrote(t *testing.T) {
	inserts := 0
	for _, q := range readQueries(t) {
		for _, problem := range checkChildRows(q) {
			t.Errorf("%s %s: %s", q.file, q.name, problem)
		}
		for _, m := range writeTargets(q.sql) {
			if strings.HasPrefix(q.sql[m[0]:], "insert into") && slices.Contains(childTables, q.sql[m[2]:m[3]]) {
				inserts++
			}
		}
	}
	// Signing, re-pricing, a single attempt, recovery, finality and the three completion
	// writes of reconciliation and adoption.
	if inserts < 8 {
		t.Fatalf("found only %d inserts into attempts and completions; is the parser still reading the files?", inserts)
	}
}

// The checker itself catches what it is there for.
func TestChildRowCheckerCatchesInsertsFromElsewhere(t *testing.T) {
	lease := "WITH " + leaseCheck + ", input AS ( SELECT unnest(@ids::uuid[]) AS tx_id ), "
	tests := []struct {
		name   string
		sql    string
		wantOK bool
	}{
		{"from the rows an update returned", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease, input i WHERE m.tx_id = i.tx_id RETURNING m.tx_id ), " +
			"a AS ( INSERT INTO tx_attempt (tx_id) SELECT i.tx_id FROM u JOIN input i ON i.tx_id = u.tx_id RETURNING 1 ) SELECT 1", true},
		{"from the rows an insert returned", lease + "n AS ( INSERT INTO managed_tx (tx_id) SELECT tx_id FROM lease, input RETURNING tx_id ), " +
			"a AS ( INSERT INTO tx_attempt (tx_id) SELECT tx_id FROM n RETURNING 1 ) SELECT 1", true},
		{"from the input alone", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease, input i WHERE m.tx_id = i.tx_id RETURNING m.tx_id ), " +
			"a AS ( INSERT INTO tx_attempt (tx_id) SELECT i.tx_id FROM lease, input i RETURNING 1 ) SELECT 1", false},
		{"from an update without RETURNING", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease, input i WHERE m.tx_id = i.tx_id ), " +
			"c AS ( INSERT INTO tx_completions (tx_id) SELECT tx_id FROM input WHERE EXISTS ( SELECT 1 FROM u ) RETURNING 1 ) SELECT 1", false},
		{"from an update of another table", lease + "u AS ( UPDATE signer_nonce_cursor SET next_nonce = 1 FROM lease RETURNING signer ), " +
			"c AS ( INSERT INTO tx_completions (tx_id) SELECT i.tx_id FROM u, input i RETURNING 1 ) SELECT 1", false},
		{"through a CTE that selects from the update", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease, input i WHERE m.tx_id = i.tx_id RETURNING m.tx_id ), " +
			"d AS MATERIALIZED ( SELECT tx_id FROM u WHERE true ), c AS ( INSERT INTO tx_completions (tx_id) SELECT tx_id FROM d LEFT JOIN input ON true RETURNING 1 ) SELECT 1", true},
		{"through a CTE that only mentions the update", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease, input i WHERE m.tx_id = i.tx_id RETURNING m.tx_id ), " +
			"d AS ( SELECT tx_id FROM input WHERE EXISTS ( SELECT 1 FROM u ) ), c AS ( INSERT INTO tx_completions (tx_id) SELECT tx_id FROM d RETURNING 1 ) SELECT 1", false},
		{"not a child table", lease + "n AS ( INSERT INTO managed_tx (tx_id) SELECT tx_id FROM lease, input RETURNING tx_id ) SELECT 1", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems := checkChildRows(namedQuery{name: tt.name, sql: normalizeSQL(tt.sql)})
			if (len(problems) == 0) != tt.wantOK {
				t.Fatalf("problems = %v, want ok = %v", problems, tt.wantOK)
			}
		})
	}
}
