package conf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// The documented production example must stay loadable: with its placeholders filled it
// passes validation, and it really enables authentication on non-loopback listeners.
func TestProductionExampleLoads(t *testing.T) {
	raw, err := os.ReadFile("../../../configs/production.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	filled := strings.NewReplacer(
		`"<sha256 hex of the key: printf %s \"$KEY\" | sha256sum>"`, `"`+strings.Repeat("a", 64)+`"`,
		`"<sha256 hex>"`, `"`+strings.Repeat("b", 64)+`"`,
		`"<sha256 hex of the scraper key>"`, `"`+strings.Repeat("c", 64)+`"`,
	).Replace(string(raw))
	path := filepath.Join(t.TempDir(), "production.yaml")
	if err := os.WriteFile(path, []byte(filled), 0o600); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"DATABASE_URL": "postgres://u:p@pooler:6543/postgres?sslmode=verify-full", "DATABASE_MIGRATION_URL": "postgres://u:p@db:5432/postgres",
		"CHAIN_RPC_URL": "https://rpc.example.com", "ADVERTISE_GRPC_ADDR": "10.0.0.5:9090", "NODE_ID": "txm-0",
	} {
		t.Setenv(k, v)
	}
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatalf("production example: %v", err)
	}
	if bc.Environment != conf.EnvironmentProduction || !bc.Auth.Enabled || bc.Routing.Mode != conf.RoutingForward || bc.Database.QueryExecMode != "exec" {
		t.Fatalf("unexpected production settings: %+v", bc)
	}
}
