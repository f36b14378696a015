package conf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Each KMS setting that cannot work is refused at load, naming the key to change.
func TestKMSSignerConfiguration(t *testing.T) {
	const gcpKey = "projects/p/locations/europe-west1/keyRings/txm/cryptoKeys/hot/cryptoKeyVersions/1"
	tests := []struct {
		name string
		yaml string
		want string // "" means accepted
	}{
		{"AWS keys by id, ARN and alias", "signers:\n  awsKms:\n    region: eu-west-1\n    keys:\n      - {id: 1234abcd-12ab-34cd-56ef-1234567890ab}\n      - {id: \"arn:aws:kms:eu-west-1:111122223333:key/1234abcd\"}\n      - {id: alias/txm-hot, address: \"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"}\n", ""},
		{"Google key version", "signers:\n  gcpKms:\n    keys: [{id: " + gcpKey + "}]\n", ""},
		{"Google plaintext emulator in development", "signers:\n  gcpKms:\n    endpoint: 127.0.0.1:9999\n    plaintext: true\n    keys: [{id: " + gcpKey + "}]\n", ""},
		{"AWS key without id", "signers:\n  awsKms:\n    keys: [{address: \"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed\"}]\n", "signers.awsKms.keys[0].id: is empty"},
		{"AWS key listed twice", "signers:\n  awsKms:\n    keys: [{id: alias/a}, {id: alias/a}]\n", "signers.awsKms.keys[1].id: is listed twice (as signers.awsKms.keys[0].id too)"},
		{"AWS address with a bad checksum", "signers:\n  awsKms:\n    keys: [{id: alias/a, address: \"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD\"}]\n", "signers.awsKms.keys[0].address"},
		{"AWS endpoint not a URL", "signers:\n  awsKms:\n    endpoint: kms.local:4000\n    keys: [{id: alias/a}]\n", "signers.awsKms.endpoint: must be an http(s) URL"},
		{"AWS without a deadline", "signers:\n  awsKms:\n    timeout: 0s\n    keys: [{id: alias/a}]\n", "signers.awsKms.timeout: must be positive"},
		{"AWS attempts out of range", "signers:\n  awsKms:\n    maxAttempts: 0\n    keys: [{id: alias/a}]\n", "signers.awsKms.maxAttempts: must be in 1..10"},
		{"Google key, not a key version", "signers:\n  gcpKms:\n    keys: [{id: projects/p/locations/l/keyRings/r/cryptoKeys/hot}]\n", "signers.gcpKms.keys[0].id: is not a crypto key version name"},
		{"Google plaintext without endpoint", "signers:\n  gcpKms:\n    plaintext: true\n    keys: [{id: " + gcpKey + "}]\n", "signers.gcpKms.endpoint: must be set"},
		{"Google attempts out of range", "signers:\n  gcpKms:\n    maxAttempts: 11\n    keys: [{id: " + gcpKey + "}]\n", "signers.gcpKms.maxAttempts: must be in 1..10"},
		{"Google plaintext in production", "environment: production\nsigners:\n  gcpKms:\n    endpoint: 127.0.0.1:9999\n    plaintext: true\n    keys: [{id: " + gcpKey + "}]\n", "signers.gcpKms.plaintext: is for a development emulator only"},
		// Signers added at run time use the connection too: no keys configured is no exception.
		{"Google plaintext in production without configured keys", "environment: production\nsigners:\n  gcpKms:\n    endpoint: 127.0.0.1:9999\n    plaintext: true\n", "signers.gcpKms.plaintext: is for a development emulator only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(tc.yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			bc, err := conf.Load(path)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want == "" && !bc.Signers.AWSKMS.Configured() && !bc.Signers.GCPKMS.Configured():
				t.Fatalf("loaded without its KMS keys: %+v", bc.Signers)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want mention of %q", err, tc.want)
			}
		})
	}
}
