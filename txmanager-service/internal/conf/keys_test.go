package conf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A misspelled or unknown key is refused, naming its full path and the key that was meant;
// a value of the wrong shape is refused naming its key.
func TestUnknownKeysAreRefusedWithTheNearestKnownKey(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"nested misspelling", "lease:\n  durration: 5s\n", "lease.durration: unknown key (did you mean lease.duration?)"},
		{"top-level misspelling", "leese:\n  duration: 5s\n", "leese: unknown key (did you mean lease?)"},
		{"top-level plural", "signer:\n  rawKeys: []\n", "signer: unknown key (did you mean signers?)"},
		{"two levels down", "pipeline:\n  receipts:\n    pollIntervall: 1s\n", "pipeline.receipts.pollIntervall: unknown key (did you mean pipeline.receipts.pollInterval?)"},
		{"snake case", "database:\n  max_conns: 5\n", "database.max_conns: unknown key (did you mean database.maxConns?)"},
		{"transposed letters", "writer:\n  batchSzie: 10\n", "writer.batchSzie: unknown key (did you mean writer.batchSize?)"},
		{"in a list entry", "chains:\n  - id: 1\n    rpcUrl: http://a\n  - id: 2\n    rpcUrll: http://b\n", "chains[1].rpcUrll: unknown key (did you mean chains[1].rpcUrl?)"},
		{"per-chain override", "chains:\n  - id: 1\n    rpcUrl: http://a\n    confirmations:\n      requird: 3\n", "chains[0].confirmations.requird: unknown key (did you mean chains[0].confirmations.required?)"},
		{"embedded listener field", "server:\n  http:\n    adr: 127.0.0.1:0\n", "server.http.adr: unknown key (did you mean server.http.addr?)"},
		{"signer source", "signers:\n  keystore:\n    passphrasefile2: /x\n", "signers.keystore.passphrasefile2: unknown key (did you mean signers.keystore.passphraseFile?)"},
		{"auth", "auth:\n  apiKeys:\n    - id: a\n      sha265: ab\n", "auth.apiKeys[0].sha265: unknown key (did you mean auth.apiKeys[0].sha256?)"},
		{"case differs", "Lease:\n  duration: 20s\n", "Lease: unknown key (did you mean lease?)"},
		{"nested case differs", "chain:\n  rpcURL: http://a\n", "chain.rpcURL: unknown key (did you mean chain.rpcUrl?)"},
		{"routing", "routing:\n  maxHop: 2\n", "routing.maxHop: unknown key (did you mean routing.maxHops?)"},
		{"nothing like it", "lease:\n  colour: blue\n", "lease.colour: unknown key (lease has clockSkew, duration, idleTimeout, notLeaderRetryAfter, renewInterval)"},
		{"duration that is not one", "lease:\n  duration: soon\n", "lease.duration: must be a duration such as 250ms, 10s or 1m30s"},
		{"number as text", "writer:\n  workers: many\n", "writer.workers: must be a whole number, not text"},
		{"section as a value", "writer: 7\n", "writer: must be a section of settings, not a number"},
		{"list expected", "chain:\n  rpcUrls: http://a\n", "chain.rpcUrls: must be a list, not text"},
		{"fraction for a count", "writer:\n  workers: 1.5\n", "writer.workers: must be a whole number, not a number with a fraction"},
		{"count out of range", "database:\n  maxConns: 99999999999\n", "database.maxConns: must be a whole number from -2147483648 to 2147483647"},
		{"a date", "lease:\n  duration: 2001-01-01\n", "a_date.yaml:2:13: lease.duration: a date or time is not a value any setting takes"},
		{"not a finite number", "create:\n  gasEstimateMultiplier: .nan\n", "create.gasEstimateMultiplier: must be a finite number"},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := conf.Load(path)
			if err == nil {
				t.Fatalf("case %d loaded", i)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q\ndoes not say %q", err, tc.want)
			}
		})
	}
}

// Every configuration the repository ships (the development file, the production example
// and the Kubernetes ConfigMap's file) has only keys the service reads.
func TestShippedConfigurationsHaveOnlyKnownKeys(t *testing.T) {
	var configMap struct {
		Data map[string]string `yaml:"data"`
	}
	raw, err := os.ReadFile("../../../deploy/kubernetes/configmap.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &configMap); err != nil || configMap.Data["config.yaml"] == "" {
		t.Fatalf("configmap: %v, data %v", err, configMap.Data)
	}
	inConfigMap := filepath.Join(t.TempDir(), "configmap-config.yaml")
	if err := os.WriteFile(inConfigMap, []byte(configMap.Data["config.yaml"]), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"defaults.yaml", "../../../configs/production.example.yaml", inConfigMap} {
		_, err := conf.Load(path)
		// A production file may still fail Check here (no DATABASE_URL in a test): only a
		// key or value problem counts.
		if err != nil && strings.HasPrefix(err.Error(), "configuration:") {
			t.Errorf("%s: %v", path, err)
		}
	}
}
