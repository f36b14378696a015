package repositories_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The sub-states come from one place (domain): the database refuses any other, the
// queries name none that domain does not list, and a migrator of an earlier release never
// takes back one a newer release added.
func TestSubStatesComeFromDomain(t *testing.T) {
	t.Parallel()
	stored := domain.StoredSubStates()
	// Every sub-state a query writes or reads by name.
	files, err := filepath.Glob("queries/*.sql")
	if err != nil || len(files) == 0 {
		t.Fatalf("queries: %v (%d files)", err, len(files))
	}
	named := regexp.MustCompile(`sub_state\s*=\s*'([A-Z_]+)'|'(?:ALLOCATED|TRACKING)',\s*'([A-Z_]+)'`)
	seen := 0
	for _, f := range files {
		sql, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range named.FindAllStringSubmatch(string(sql), -1) {
			value := m[1] + m[2]
			if domain.State(value).Valid() {
				continue // a state list (state IN ('TRACKING', 'STUCK')), not a sub-state
			}
			seen++
			if !slices.Contains(stored, domain.SubState(value)) {
				t.Errorf("%s names sub-state %s, which domain.StoredSubStates does not list", f, value)
			}
		}
	}
	if seen < 8 {
		t.Fatalf("found %d sub-states named in the queries: the check reads nothing", seen)
	}

	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	insert := func(subState string) error {
		_, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, fencing_token)
			VALUES (1337, gen_random_uuid(), '0x00000000000000000000000000000000000000f1', '\x00', (SELECT count(*) FROM managed_tx), '{}', 'TRACKING', $1, 1)`, subState)
		return err
	}
	for _, s := range stored {
		if err := insert(string(s)); err != nil {
			t.Errorf("sub-state %s refused: %v", s, err)
		}
	}
	var pgErr *pgconn.PgError
	if err := insert("NOT_A_SUB_STATE"); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("an unknown sub-state: %v, want a check violation (23514)", err)
	}

	// A newer release allowed FUTURE_STATE; this release's migrator keeps it.
	if _, err := pool.Exec(ctx, `ALTER TABLE managed_tx DROP CONSTRAINT managed_tx_sub_state_check,
		ADD CONSTRAINT managed_tx_sub_state_check CHECK (sub_state IS NULL OR sub_state IN ('FUTURE_STATE', 'SIGNED')) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	if _, err := repositories.Migrate(ctx, pool.Config().ConnString(), migrations.FS); err != nil {
		t.Fatal(err)
	}
	if err := insert("FUTURE_STATE"); err != nil {
		t.Errorf("a sub-state a newer release allowed was taken back: %v", err)
	}
	if err := insert(string(domain.SubStateMined)); err != nil {
		t.Errorf("this release's sub-state MINED refused after the migrator ran again: %v", err)
	}
}
