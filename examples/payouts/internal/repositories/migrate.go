package repositories

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/bionicotaku/txmanager-service/client/feed"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one schema step, applied once, in order of name.
type migration struct {
	name string
	sql  string
}

// migrationLockKey serializes migrating processes (pg_advisory_xact_lock): two instances
// starting together must not both apply a step.
const migrationLockKey = 0x7061796f75747321 // "payouts!"

// Migrator applies the embedded migrations.
type Migrator struct {
	tx  txmanager.Manager
	log *log.Helper
}

// NewMigrator builds the migrator.
func NewMigrator(tx txmanager.Manager, logger log.Logger) *Migrator {
	return &Migrator{tx: tx, log: loggerHelper(logger)}
}

// migrations are the SQL files plus the txmanager client's cursor table, whose definition
// the client owns (feed.Schema) so it is not copied here.
func migrations() ([]migration, error) {
	var steps []migration
	err := fs.WalkDir(migrationFiles, "migrations", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		body, err := migrationFiles.ReadFile(path)
		if err != nil {
			return err
		}
		steps = append(steps, migration{name: strings.TrimSuffix(d.Name(), ".sql"), sql: string(body)})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	steps = append(steps, migration{name: "0002_txmanager_feed_cursor", sql: feed.Schema})
	slices.SortFunc(steps, func(a, b migration) int { return strings.Compare(a.name, b.name) })
	return steps, nil
}

// Migrate applies every step not yet applied, all in one transaction: a failure leaves the
// schema as it was.
func (m *Migrator) Migrate(ctx context.Context) error {
	steps, err := migrations()
	if err != nil {
		return err
	}
	var applied []string
	opts := txmanager.DefaultOptions().WithTraceName("payouts.migrate").WithTimeout(time.Minute).WithLockTimeout(time.Minute)
	err = m.tx.WithinTx(ctx, opts, func(ctx context.Context, s txmanager.Session) error {
		applied = nil
		db := s.DB()
		if _, err := db.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(migrationLockKey)); err != nil {
			return err
		}
		if _, err := db.Exec(ctx, `CREATE TABLE IF NOT EXISTS payouts_schema_migrations (
			name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		for _, step := range steps {
			tag, err := db.Exec(ctx, "INSERT INTO payouts_schema_migrations (name) VALUES ($1) ON CONFLICT DO NOTHING", step.name)
			if err != nil {
				return err
			}
			if tag.RowsAffected() == 0 {
				continue
			}
			if _, err := db.Exec(ctx, step.sql); err != nil {
				return fmt.Errorf("migration %s: %w", step.name, err)
			}
			applied = append(applied, step.name)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	m.log.Infow("msg", "database migrated", "applied", strings.Join(applied, ","))
	return nil
}
