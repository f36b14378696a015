package repositories_test

import (
	"context"
	"strings"
	"testing"

	"github.com/go-kratos/kratos/v2/log"

	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// A DSN that does not parse is refused without quoting it: pgx's message quotes the whole
// string, and its masking of the password misses "password = x" (spaces around the equals
// sign, which it accepts). Start-up prints these errors.
func TestDSNsThatDoNotParseAreNotQuoted(t *testing.T) {
	t.Parallel()
	const password = "S3cretA"
	tests := []struct{ name, dsn string }{
		{"keyword form, spaced password, a misspelt option", "host=db user=u password = " + password + " sslmode=required"},
		{"URL form, an unknown option value", "postgres://u:" + password + "@db/x?sslmode=sometimes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, migrateErr := repositories.Migrate(context.Background(), tc.dsn, migrations.FS)
			watch, err := repositories.NewServerWatch(log.DefaultLogger, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			_, _, poolErr := repositories.NewPool(conf.Database{DSN: tc.dsn}, log.DefaultLogger, watch, telemetry.Noop())
			for what, err := range map[string]error{"migrate": migrateErr, "pool": poolErr} {
				if err == nil || strings.Contains(err.Error(), password) {
					t.Errorf("%s: %v, want a refusal without the password", what, err)
				}
			}
		})
	}
}
