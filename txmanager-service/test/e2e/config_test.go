package e2e

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestRenderConfig(t *testing.T) {
	t.Parallel()
	keys := Keys(2)
	base := ServiceConfig{
		NodeID: "n1", HTTPAddr: "127.0.0.1:1001", GRPCAddr: "127.0.0.1:1002",
		DatabaseDSN: "postgres://postgres@127.0.0.1:5432/db1", ChainRPCURL: "http://127.0.0.1:1003", Signers: keys,
	}
	withOverrides := FastLoops(base)
	withOverrides.Overrides = map[string]any{"lease.duration": 4 * time.Second, "pipeline.submitInterval": "50ms"}
	tests := []struct {
		name   string
		config ServiceConfig
		want   map[string]any // dotted path -> value read back from the YAML
		absent []string
	}{
		{
			name:   "required keys only",
			config: base,
			want: map[string]any{
				"environment": "development", "node.id": "n1",
				"server.http.addr": "127.0.0.1:1001", "server.grpc.addr": "127.0.0.1:1002",
				"database.dsn": "postgres://postgres@127.0.0.1:5432/db1", "database.migrateOnStart": true,
				"chain.rpcUrl": "http://127.0.0.1:1003",
			},
			absent: []string{"confirmations", "pipeline", "resubmit"},
		},
		{
			name:   "fast loops",
			config: FastLoops(base),
			want: map[string]any{
				"confirmations.required": 2, "pipeline.submitInterval": "200ms",
				"pipeline.receipts.pollInterval": "500ms", "pipeline.finalityInterval": "500ms",
				"resubmit.interval": "15s", "resubmit.scanInterval": "1s",
			},
		},
		{
			name:   "overrides win and add keys",
			config: withOverrides,
			want: map[string]any{
				"lease.duration": "4s", "pipeline.submitInterval": "50ms", "pipeline.finalityInterval": "500ms",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			body, err := RenderConfig(tt.config)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(string(body), "# ") {
				t.Errorf("config does not start with its explanatory header:\n%s", body)
			}
			var doc map[string]any
			if err := yaml.Unmarshal(body, &doc); err != nil {
				t.Fatalf("rendered config is not YAML: %v\n%s", err, body)
			}
			for path, want := range tt.want {
				if got := lookup(doc, path); got != want {
					t.Errorf("%s = %#v, want %#v", path, got, want)
				}
			}
			for _, path := range tt.absent {
				if got := lookup(doc, path); got != nil {
					t.Errorf("%s = %#v, want it left to the defaults", path, got)
				}
			}
			rawKeys, _ := lookup(doc, "signers.rawKeys").([]any)
			if len(rawKeys) != 2 || rawKeys[0] != KeyHex(keys[0]) || rawKeys[1] != KeyHex(keys[1]) {
				t.Errorf("signers.rawKeys = %v, want the two keys as 0x-hex", rawKeys)
			}
		})
	}
}

func TestRenderConfigRejectsOverrideIntoValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		path    string
		wantErr string
	}{
		{"node.id.extra", "node.id is a value"},
		{"lease..duration", "empty segment"},
	}
	for _, tt := range tests {
		_, err := RenderConfig(ServiceConfig{NodeID: "n1", Overrides: map[string]any{tt.path: "x"}})
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("override %q: error %v, want one containing %q", tt.path, err, tt.wantErr)
		}
	}
}

func lookup(doc map[string]any, path string) any {
	var node any = doc
	for _, part := range strings.Split(path, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[part]
	}
	return node
}
