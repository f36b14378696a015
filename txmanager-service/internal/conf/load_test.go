package conf_test

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Secrets a broken configuration file holds. Named so that `make secret-scan` looks for them
// in the test output (it collects the literals of variables named passphrase and password
// from the tests); the raw key is a development key, which it knows too.
const (
	passphrase = "Wh1sper-9zq7-Tk3v"
	password   = "Pw5kq8m2xr-Jd7"
)

// kratosLog holds what Kratos logs through its process-wide logger, where its config
// reader writes a whole document it failed to decode. Set once, before any test loads a
// configuration: the config watchers' goroutines log through it at any time.
var kratosLog syncBuffer

func TestMain(m *testing.M) {
	log.SetLogger(log.NewStdLogger(&kratosLog))
	os.Exit(m.Run())
}

// No error Load returns and nothing Kratos logs while loading quotes a value of the file,
// whatever is wrong with it: a broken file is where a raw key, a passphrase or a DSN password
// ends up in an error, and errors reach the log. Each error still names the file's line or
// the key to change. The test prints the error and Kratos' log, so the secret scan reads
// them too.
func TestLoadErrorsNeverQuoteValues(t *testing.T) {
	devKey, err := chain.DevKey(0)
	if err != nil {
		t.Fatal(err)
	}
	rawKey := hex.EncodeToString(crypto.FromECDSA(devKey))
	secrets := []string{rawKey, passphrase, password}
	fill := strings.NewReplacer("$KEY", rawKey, "$PASSPHRASE", passphrase, "$PASSWORD", password).Replace
	const dsn = "postgres://txm:$PASSWORD@db.example/txm"
	tests := []struct {
		name string
		yaml string
		want []string // what the error must say (file, line, key)
	}{
		// Not YAML at all: Kratos logs the whole file when its decoder fails on one.
		{"unclosed list", "signers:\n  rawKeys: [\"0x$KEY\"\ndatabase:\n  dsn: " + dsn + "\n",
			[]string{"config.yaml:2: not valid YAML: did not find expected ',' or ']'"}},
		{"tab indentation", "database:\n  dsn: " + dsn + "\n\tmaxConns: 4\nsigners:\n  rawKeys: [\"0x$KEY\"]\n",
			[]string{"config.yaml:2: not valid YAML: found a tab character that violates indentation"}},
		{"unterminated quote", "signers:\n  keystore:\n    dir: /keys\n    passphraseFile: \"$PASSPHRASE\n",
			[]string{"config.yaml:4: not valid YAML: found unexpected end of stream"}},
		{"alias to an unknown anchor", "signers:\n  rawKeys: [*0x$KEY]\n",
			[]string{"config.yaml: not valid YAML: unknown anchor (…) referenced"}},
		// Keys written twice: yaml.v3 refuses them, so Kratos' decoder fails the same way.
		{"key twice", "signers:\n  rawKeys: [\"0x$KEY\"]\n  rawKeys: [\"0x$KEY\"]\n",
			[]string{"config.yaml:3:3: signers.rawKeys: is written twice (first at line 2)"}},
		{"section twice", "database:\n  dsn: " + dsn + "\ndatabase:\n  dsn: " + dsn + "\n",
			[]string{"config.yaml:3:1: database: is written twice (first at line 1)"}},
		{"key twice in a list entry", "chains:\n  - id: 5\n    rpcUrl: https://a.example\n    id: 6\nsigners:\n  rawKeys: [\"0x$KEY\"]\n",
			[]string{"config.yaml:4:5: chains[0].id: is written twice (first at line 2)"}},
		// Values of the wrong type: the message says what the value is, not what it says.
		{"raw keys as text", "signers:\n  rawKeys: \"0x$KEY\"\n", []string{"signers.rawKeys: must be a list, not text"}},
		{"keystore as text", "signers:\n  keystore: \"$PASSPHRASE\"\n", []string{"signers.keystore: must be a section of settings, not text"}},
		{"database as a DSN", "database: " + dsn + "\n", []string{"database: must be a section of settings, not text"}},
		{"DSN as a number", "database:\n  maxConns: \"" + dsn + "\"\n", []string{"database.maxConns: must be a whole number, not text"}},
		{"passphrase as a duration", "lease:\n  duration: \"$PASSPHRASE\"\n", []string{"lease.duration: must be a duration such as"}},
		{"raw key as a list entry of the wrong shape", "signers:\n  rawKeys: [{key: \"0x$KEY\"}]\n", []string{"signers.rawKeys[0]: must be text, not a section"}},
		{"value against its tag", "database:\n  dsn: " + dsn + "\n  maxConns: !!int \"$PASSWORD\"\n",
			[]string{"config.yaml:3:13: database.maxConns: the value does not match its YAML tag"}},
		{"list as a key", "signers:\n  ? [\"0x$KEY\"]\n  : 1\n", []string{"config.yaml:2:5: signers: a key must be text, not a list"}},
		{"list as the file", "- 0x$KEY\n- $PASSPHRASE\n", []string{"config.yaml:1:1: the configuration: must be a section of settings (key: value lines), not a list"}},
		// Values the checks refuse.
		{"DSN as the chain endpoint", "chain:\n  rpcUrl: \"" + dsn + "\"\n", []string{"chain.rpcUrl: is not a JSON-RPC URL"}},
		{"DSN in an endpoint list", "chain:\n  rpcUrl: \"https://a.example," + dsn + "\"\n", []string{"chain.rpcUrl (URL 2 of 2): is not a JSON-RPC URL"}},
		{"external signer with a password Go cannot parse", "signers:\n  external:\n    url: \"http://ops:$PASSWORD/x@clef.example:8550\"\n    addresses: [\"0x0000000000000000000000000000000000000001\"]\n",
			[]string{"signers.external.url: is not a JSON-RPC URL"}},
		{"passphrase as the exec mode", "database:\n  queryExecMode: \"$PASSPHRASE\"\n", []string{"database.queryExecMode: must be cache_statement"}},
		{"raw key as a listen address", "server:\n  http:\n    addr: \"0x$KEY\"\n", []string{"server.http.addr: refusing to listen beyond loopback"}},
		{"raw key as the environment", "environment: \"0x$KEY\"\nsigners:\n  rawKeys: [\"0x$KEY\"]\n",
			[]string{"environment: must be \"development\" or \"production\"", "signers.rawKeys: raw keys are for development only"}},
		{"passphrase as a KMS key", "signers:\n  gcpKms:\n    keys: [{id: \"$PASSPHRASE\"}, {id: \"$PASSPHRASE\"}]\n",
			[]string{"signers.gcpKms.keys[0].id: is not a crypto key version name", "signers.gcpKms.keys[1].id: is not a crypto key version name"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(fill(tc.yaml)), 0o600); err != nil {
				t.Fatal(err)
			}
			logged := kratosLog.Len()
			_, err := conf.Load(path)
			kratos := kratosLog.From(logged)
			t.Logf("error: %v", err)
			t.Logf("Kratos logged:\n%s", kratos)
			if err == nil {
				t.Fatal("the configuration was accepted")
			}
			for _, want := range tc.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q", want)
				}
			}
			for _, secret := range secrets {
				if piece := leaked(err.Error(), secret); piece != "" {
					t.Errorf("the error quotes %q of a secret", piece)
				}
				if piece := leaked(kratos, secret); piece != "" {
					t.Errorf("Kratos logged %q of a secret", piece)
				}
			}
		})
	}
}

// leaked is the first piece (8 characters or more) of secret found in text, or "": yaml.v3
// quotes the first seven characters of a value it cannot decode, a start that may already
// say which key it is.
func leaked(text, secret string) string {
	const piece = 8
	for i := 0; i+piece <= len(secret); i++ {
		if strings.Contains(text, secret[i:i+piece]) {
			return secret[i : i+piece]
		}
	}
	return ""
}

// syncBuffer is a log sink written by Kratos' goroutines while a test reads it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// From is what was written since the buffer held n bytes.
func (b *syncBuffer) From(n int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf.Bytes()[n:])
}
