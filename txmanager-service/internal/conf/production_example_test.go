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
	bc, err := conf.Load(productionExample(t, ""))
	if err != nil {
		t.Fatalf("production example: %v", err)
	}
	if bc.Environment != conf.EnvironmentProduction || !bc.Auth.Enabled || bc.Routing.Mode != conf.RoutingForward || bc.Database.QueryExecMode != "exec" {
		t.Fatalf("unexpected production settings: %+v", bc)
	}
}

// Each documented signers section (configs/signers) in place of the example's loads in
// production and configures its key source, and nothing else.
func TestProductionSignerExamplesLoad(t *testing.T) {
	tests := []struct {
		file string
		uses func(conf.Signers) bool
	}{
		{"aws-kms.yaml", func(s conf.Signers) bool {
			return s.AWSKMS.Configured() && s.AWSKMS.Region != "" && !s.GCPKMS.Configured() && s.External.URL == "" && s.Keystore.Dir == ""
		}},
		{"gcp-kms.yaml", func(s conf.Signers) bool {
			return s.GCPKMS.Configured() && !s.GCPKMS.Plaintext && !s.AWSKMS.Configured() && s.External.URL == "" && s.Keystore.Dir == ""
		}},
		{"clef.yaml", func(s conf.Signers) bool {
			return s.External.URL != "" && len(s.External.Addresses) == 1 && !s.AWSKMS.Configured() && !s.GCPKMS.Configured() && s.Keystore.Dir == ""
		}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			signers, err := os.ReadFile(filepath.Join("../../../configs/signers", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			bc, err := conf.Load(productionExample(t, string(signers)))
			if err != nil {
				t.Fatalf("production example with %s: %v", tt.file, err)
			}
			if !tt.uses(bc.Signers) {
				t.Fatalf("%s does not configure its source alone: %+v", tt.file, bc.Signers)
			}
		})
	}
}

// productionExample writes configs/production.example.yaml, with its signers section
// replaced by signersYAML when given and its placeholders filled, to a file, and sets the
// environment it expects; it returns the file.
func productionExample(t *testing.T, signersYAML string) string {
	t.Helper()
	raw, err := os.ReadFile("../../../configs/production.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)
	if signersYAML != "" {
		start := strings.Index(text, "\nsigners:\n")
		end := strings.Index(text[start+1:], "\n\n")
		if start < 0 || end < 0 {
			t.Fatal("production.example.yaml: no signers section followed by a blank line")
		}
		text = text[:start+1] + signersYAML + text[start+1+end:]
	}
	filled := strings.NewReplacer(
		`"<sha256 hex of the key: printf %s \"$KEY\" | sha256sum>"`, `"`+strings.Repeat("a", 64)+`"`,
		`"<sha256 hex>"`, `"`+strings.Repeat("b", 64)+`"`,
		`"<sha256 hex of the scraper key>"`, `"`+strings.Repeat("c", 64)+`"`,
		// A signer example's addresses: any valid one.
		`"<0x address alias/txm-hot-1 holds>"`, `"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"`,
		`"<0x address txm-hot-1 holds>"`, `"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"`,
		`"<0x address clef holds>"`, `"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"`,
	).Replace(text)
	if strings.Contains(filled, `"<`) {
		t.Fatalf("a placeholder is left unfilled:\n%s", filled)
	}
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
	return path
}
