package repositories

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// Every write to a table that holds a signer's state must be fenced
// (docs/design.md#lease-and-fencing): the core invariant may not depend on a reviewer
// noticing a missing lease check. These tests read the queries sqlc compiles and fail when
// a write to a fenced table does not go through the lease row locked FOR KEY SHARE.

// fencedTables hold signer state that only the lease holder may change.
var fencedTables = []string{"managed_tx", "signer_nonce_cursor", "tx_attempt", "tx_completions", "stuck_resolution_audit", "signer_quarantine", "signer_signing"}

// unfencedTables are written without a lease on purpose: the lease itself (its own
// statements judge ownership atomically), the node registry (each node's own row) and the
// chain identity (recorded once, at a database's first start), and the signer roster (an
// operator's record of which signers serve, not a signer's nonce state: allocation reads
// it under a row lock inside its fenced batch, which a retirement waits for).
var unfencedTables = []string{"signer_lease", "node_registry", "chain_identity", "feed_sequencer", "signer_roster",
	// The cluster's admin state, changed by operators from any node: the audit trail (its
	// appends take turns on audit_head's lock) and the spending policies.
	"audit_record", "audit_head", "spending_policy", "spending_policy_version",
	// Counted inside the writer batch's transaction after its lease check locked the lease
	// row; a credential's totals span signers, so no one lease could fence them.
	"policy_spend",
	// Intents waiting for approval hold no nonce: approvers vote from any node, any node
	// expires them, each change conditional on the row's state under its lock; the writer
	// marks one admitted inside its fenced batch.
	"tx_approval", "tx_approval_vote",
	// A webhook subscription carries its own lease: delivery moves its cursor only with the
	// token it holds (AdvanceSubscription, RecordDeliveryFailure), and operators' changes move
	// the token on.
	"webhook_subscription",
	// Events beyond completions take their positions under event_sequencer's lock; a signer's
	// funding marks change under the row's lock (each crossing once, whichever node looks),
	// and a refill is an ordinary create, fenced on the treasury's lease.
	"event_sequencer", "service_event", "signer_funding",
	// Console sessions signed out: not signer state; an operator signs out on any node.
	"console_session_ended"}

// unfencedQueries write a fenced table without a signer's lease, each for the reason given.
var unfencedQueries = map[string]string{
	// Feed positions are not signer state: any node positions committed completions, one
	// round at a time under the feed_sequencer row lock (LockFeedSequencer).
	"AssignFeedPositions": "feed positions",
	// Retention deletes final rows past the horizon, which no lease holder writes any more.
	"PruneFinal": "final rows past the retention horizon",
	// An operator asks for a quarantine's release from any node; the release itself
	// (FinishRecovery, with the cursor's move) is fenced on the signer's lease holder.
	"RequestRelease": "an operator's release request",
	// An intent that ended without a nonce (rejected, refused, expired): its completion comes
	// from its approval's row, which the statement moved to the final state under its lock;
	// no signer's nonce state changes.
	"FinishApproval":  "an approval's final state",
	"ExpireApprovals": "approvals past their expiry",
}

// leaseCheck is the one fencing clause: the lease row of the signer on the chain, still held by this
// node with this token and unexpired, locked FOR KEY SHARE so that a takeover (an UPDATE of
// that row's key columns owner_node and fencing_token) waits for the writing statement's
// transaction to end, while the owner's renewal (expires_at only) does not.
const leaseCheck = "lease as materialized ( select 1 from signer_lease sl where sl.chain_id = @chain_id and sl.signer = @signer and sl.owner_node = @node_id " +
	"and sl.fencing_token = @fencing_token and sl.expires_at > now() for key share )"

// leasesCheck is the same clause for a batch of signers (WriteClearAllocations): each signer's
// lease row matched on the (signer, fencing_token) pair given for it, held by this node and
// unexpired, locked FOR KEY SHARE. It yields the (signer, token) pairs whose lease holds, so
// whatever reads it must match each row to its own pair (leasesJoin);
// TestClearAllocationsWriteEachSignerOnItsOwnGate shows that the statement using it does.
const leasesCheck = "leases as materialized ( select sl.signer, sl.fencing_token from signer_lease sl join ( select unnest ( @signers::text[] ) as signer, " +
	"unnest ( @fencing_tokens::bigint[] ) as fencing_token ) as held on sl.signer = held.signer and sl.fencing_token = held.fencing_token " +
	"where sl.chain_id = @chain_id and sl.owner_node = @node_id and sl.expires_at > now() for key share of sl )"

// leasesJoin is the one way to read the batch lease CTE: joined on a row's own signer and
// token, never crossed with the rows (which would let every signer's rows through when any
// one lease holds).
var leasesJoin = regexp.MustCompile(`\bjoin leases (\w+) on (\w+)\.signer = (\w+)\.signer and (\w+)\.fencing_token = (\w+)\.fencing_token\b`)

// leasesName finds every mention of the batch lease CTE, its definition included.
var leasesName = regexp.MustCompile(`\bleases\b`)

type namedQuery struct {
	file, name, sql string // sql: lower case, comments removed, whitespace collapsed
}

var (
	queryName   = regexp.MustCompile(`(?m)^-- name: (\w+)`)
	lineComment = regexp.MustCompile(`--[^\n]*`)
	spaces      = regexp.MustCompile(`\s+`)
	writeTarget = regexp.MustCompile(`\b(?:insert into|update|delete from) (\w+)`)
	cteStart    = regexp.MustCompile(`\b(\w+) as (?:materialized )?\(`)
)

func readQueries(t *testing.T) []namedQuery {
	t.Helper()
	files, err := filepath.Glob("queries/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("no queries found (%v)", err)
	}
	var queries []namedQuery
	for _, file := range files {
		body, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(body)
		starts := queryName.FindAllStringSubmatchIndex(text, -1)
		for i, m := range starts {
			end := len(text)
			if i+1 < len(starts) {
				end = starts[i+1][0]
			}
			sql := normalizeSQL(text[m[1]:end])
			queries = append(queries, namedQuery{file: file, name: text[m[2]:m[3]], sql: sql})
		}
	}
	return queries
}

// normalizeSQL makes queries comparable as text: lower case, no comments, one space between
// tokens and around parentheses.
func normalizeSQL(s string) string {
	s = lineComment.ReplaceAllString(strings.ToLower(s), " ")
	s = strings.NewReplacer("(", " ( ", ")", " ) ").Replace(s)
	return strings.TrimSpace(spaces.ReplaceAllString(s, " "))
}

// enclosing returns the text from pos to the end of the parenthesised expression (a CTE
// body) it sits in, or to the end of the statement.
func enclosing(sql string, pos int) string {
	depth := 0
	for i := pos; i < len(sql); i++ {
		switch sql[i] {
		case '(':
			depth++
		case ')':
			if depth == 0 {
				return sql[pos:i]
			}
			depth--
		}
	}
	return sql[pos:]
}

func mentions(text, word string) bool {
	return regexp.MustCompile(`\b` + regexp.QuoteMeta(word) + `\b`).MatchString(text)
}

// cteBodies maps each CTE of sql to its body.
func cteBodies(sql string) map[string]string {
	bodies := map[string]string{}
	for _, m := range cteStart.FindAllStringSubmatchIndex(sql, -1) {
		bodies[sql[m[2]:m[3]]] = strings.TrimSpace(enclosing(sql, m[1]))
	}
	return bodies
}

// fencedCTEs names the CTEs whose rows depend on the lease CTE, directly or through other
// fenced CTEs (a completion inserted from the rows a fenced UPDATE returned is fenced too).
func fencedCTEs(sql string) map[string]bool {
	bodies := cteBodies(sql)
	fenced := map[string]bool{"lease": strings.Contains(sql, normalizeSQL(leaseCheck)), "leases": strings.Contains(sql, normalizeSQL(leasesCheck))}
	for changed := true; changed; {
		changed = false
		for name, body := range bodies {
			if fenced[name] {
				continue
			}
			for dep, ok := range fenced {
				if ok && mentions(body, dep) {
					fenced[name], changed = true, true
					break
				}
			}
		}
	}
	return fenced
}

// writeTargets finds the INSERT, UPDATE and DELETE statements; an upsert's ON CONFLICT DO
// UPDATE belongs to its INSERT.
func writeTargets(sql string) [][]int {
	var targets [][]int
	for _, m := range writeTarget.FindAllStringSubmatchIndex(sql, -1) {
		if !strings.HasSuffix(sql[:m[0]], "do ") {
			targets = append(targets, m)
		}
	}
	return targets
}

// leasesReadPerRow reports whether every reading of the batch lease CTE in sql is a
// leasesJoin on the joined rows' own signer and token.
func leasesReadPerRow(sql string) bool {
	// The alias and the row side must pair up: "join leases l on l.signer = s.signer and
	// l.fencing_token = s.fencing_token".
	matched := 0
	for _, m := range leasesJoin.FindAllStringSubmatch(sql, -1) {
		if m[2] == m[1] && m[4] == m[1] && m[3] == m[5] && m[3] != m[1] {
			matched++
		}
	}
	uses := len(leasesName.FindAllStringIndex(sql, -1)) - 1 // less its definition
	return uses == matched
}

// checkFencing returns what is wrong with one query's writes, or nothing.
func checkFencing(q namedQuery) []string {
	var problems []string
	fenced := fencedCTEs(q.sql)
	if fenced["leases"] && !leasesReadPerRow(q.sql) {
		problems = append(problems, "reads the batch lease CTE other than joined on each row's own signer and token (JOIN leases l ON l.signer = x.signer AND l.fencing_token = x.fencing_token)")
	}
	for _, m := range writeTargets(q.sql) {
		table := q.sql[m[2]:m[3]]
		switch {
		case slices.Contains(unfencedTables, table):
			continue
		case !slices.Contains(fencedTables, table):
			problems = append(problems, "writes "+table+", which is neither in fencedTables nor in unfencedTables: classify it")
			continue
		}
		if !fenced["lease"] && !fenced["leases"] {
			problems = append(problems, "writes "+table+" without the lease check (the `lease` or `leases` CTE locking signer_lease FOR KEY SHARE)")
			continue
		}
		statement := enclosing(q.sql, m[0])
		ok := false
		for name, isFenced := range fenced {
			if isFenced && mentions(statement, name) {
				ok = true
				break
			}
		}
		if !ok {
			problems = append(problems, "writes "+table+" in a statement that does not read the lease CTE (FROM lease)")
		}
	}
	return problems
}

func TestEveryWriteToAFencedTableChecksTheLease(t *testing.T) {
	queries := readQueries(t)
	fencedWrites := 0
	for _, q := range queries {
		if _, exempt := unfencedQueries[q.name]; exempt {
			continue
		}
		for _, problem := range checkFencing(q) {
			t.Errorf("%s %s: %s", q.file, q.name, problem)
		}
		for _, m := range writeTargets(q.sql) {
			if slices.Contains(fencedTables, q.sql[m[2]:m[3]]) {
				fencedWrites++
			}
		}
	}
	// The queries are really being read: the allocation, pipeline and stuck writes.
	if fencedWrites < 10 {
		t.Fatalf("found only %d writes to fenced tables in %d queries; is the parser still reading the files?", fencedWrites, len(queries))
	}
}

// The checker itself catches what it is there for.
func TestFencingCheckerCatchesUnfencedWrites(t *testing.T) {
	lease := "WITH " + leaseCheck + ", "
	tests := []struct {
		name   string
		sql    string
		wantOK bool
	}{
		{"fenced update", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease WHERE m.tx_id = @id RETURNING 1 ) SELECT 1", true},
		{"insert fed by a fenced update", lease + "u AS ( UPDATE managed_tx m SET state = 'X' FROM lease RETURNING m.tx_id ), " +
			"c AS ( INSERT INTO tx_completions (tx_id) SELECT tx_id FROM u RETURNING 1 ) SELECT 1", true},
		{"lease CTE present but the write ignores it", lease + "u AS ( UPDATE managed_tx m SET state = 'X' WHERE m.tx_id = @id RETURNING 1 ) SELECT 1", false},
		{"no lease CTE", "UPDATE managed_tx SET state = 'X' WHERE tx_id = @id", false},
		{"lease CTE without FOR KEY SHARE", "WITH lease AS MATERIALIZED ( SELECT 1 FROM signer_lease sl WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id " +
			"AND sl.fencing_token = @fencing_token AND sl.expires_at > now() ) UPDATE managed_tx m SET state = 'X' FROM lease", false},
		{"lease CTE without expiry", "WITH lease AS MATERIALIZED ( SELECT 1 FROM signer_lease sl WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id " +
			"AND sl.fencing_token = @fencing_token FOR KEY SHARE ) UPDATE managed_tx m SET state = 'X' FROM lease", false},
		{"batch of signers through leases", "WITH " + leasesCheck + ", g AS ( SELECT s.signer FROM input s JOIN leases l ON l.signer = s.signer AND l.fencing_token = s.fencing_token ), " +
			"i AS ( INSERT INTO managed_tx (signer) SELECT signer FROM g RETURNING 1 ) SELECT 1", true},
		{"leases crossed with the rows", "WITH " + leasesCheck + ", g AS ( SELECT s.signer FROM input s, leases ), " +
			"i AS ( INSERT INTO managed_tx (signer) SELECT signer FROM g RETURNING 1 ) SELECT 1", false},
		{"leases joined on the signer alone", "WITH " + leasesCheck + ", g AS ( SELECT s.signer FROM input s JOIN leases l ON l.signer = s.signer ), " +
			"i AS ( INSERT INTO managed_tx (signer) SELECT signer FROM g RETURNING 1 ) SELECT 1", false},
		{"leases joined on another row's signer", "WITH " + leasesCheck + ", g AS ( SELECT s.signer FROM input s, input o JOIN leases l ON l.signer = o.signer AND l.fencing_token = s.fencing_token ), " +
			"i AS ( INSERT INTO managed_tx (signer) SELECT signer FROM g RETURNING 1 ) SELECT 1", false},
		{"leases CTE without the token", "WITH leases AS MATERIALIZED ( SELECT sl.signer FROM signer_lease sl JOIN ( SELECT unnest(@signers::text[]) AS signer ) AS held " +
			"ON sl.signer = held.signer WHERE sl.chain_id = @chain_id AND sl.owner_node = @node_id AND sl.expires_at > now() FOR KEY SHARE OF sl ) " +
			"INSERT INTO managed_tx (signer) SELECT signer FROM leases", false},
		{"leases CTE without FOR KEY SHARE", "WITH " + strings.Replace(leasesCheck, " for key share of sl", "", 1) + " INSERT INTO managed_tx (signer) SELECT signer FROM leases", false},
		{"unclassified table", "DELETE FROM some_new_table WHERE id = 1", false},
		{"node registry", "UPDATE node_registry SET stopped_at = now() WHERE node_id = @node_id", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := namedQuery{name: tt.name, sql: normalizeSQL(tt.sql)}
			problems := checkFencing(q)
			if (len(problems) == 0) != tt.wantOK {
				t.Fatalf("problems = %v, want ok = %v", problems, tt.wantOK)
			}
		})
	}
}
