package pglocal_test

import (
	"testing"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn, database, want string
	}{
		{"postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "e2e_1", "postgres://postgres@127.0.0.1:5432/e2e_1?sslmode=disable"},
		{"postgresql://u:p@db:6543", "e2e_2", "postgresql://u:p@db:6543/e2e_2"},
		{"host=127.0.0.1 user=postgres dbname=postgres", "e2e_3", "host=127.0.0.1 user=postgres dbname=postgres dbname=e2e_3"},
	}
	for _, tt := range tests {
		if got := pglocal.WithDatabase(tt.dsn, tt.database); got != tt.want {
			t.Errorf("WithDatabase(%q, %q) = %q, want %q", tt.dsn, tt.database, got, tt.want)
		}
	}
}
