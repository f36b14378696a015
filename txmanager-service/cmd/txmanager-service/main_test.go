package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

// Secrets a broken configuration file holds. Named so that `make secret-scan` looks for them
// in the test output (it collects the literals of variables named passphrase and password
// from the tests); the raw key is a development key, which it knows too.
const (
	passphrase = "Qv7-Mumble-8Lx2Rr"
	password   = "Kz3pW9-Dsn-Pw4"
)

// runMainArgs, set in the environment, makes this test binary the service: TestMain runs
// main with these arguments (tab-separated) instead of the tests.
const runMainArgs = "TXM_TEST_RUN_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(runMainArgs); ok {
		os.Args = append([]string{"txmanager-service"}, strings.Split(args, "\t")...)
		main()
		os.Exit(0)
	}
	pgtest.Main(m)
}

// The service, started with a configuration file that is broken and full of secrets, exits
// with an error naming where the file is wrong, and neither that error nor anything logged
// before it (Kratos' own logger included, which main keeps at warnings) quotes a value of
// the file. The test prints everything the process wrote, so the secret scan reads it too.
func TestConfigErrorsNeverReachTheOutput(t *testing.T) {
	devKey, err := chain.DevKey(1)
	if err != nil {
		t.Fatal(err)
	}
	rawKey := hex.EncodeToString(crypto.FromECDSA(devKey))
	fill := strings.NewReplacer("$KEY", rawKey, "$PASSPHRASE", passphrase, "$PASSWORD", password).Replace
	const secretsBelow = "database:\n  dsn: postgres://txm:$PASSWORD@db.example/txm\nsigners:\n  rawKeys: [\"0x$KEY\"]\n  keystore: {dir: /keys, passphraseFile: \"$PASSPHRASE\"}\n"
	tests := []struct {
		name string
		yaml string
		want string // what the error must say
	}{
		{"malformed YAML", "lease: [10s\n" + secretsBelow, "config.yaml:2: not valid YAML: did not find expected ',' or ']'"},
		{"duplicated key", secretsBelow + "signers:\n  rawKeys: [\"0x$KEY\"]\n", "config.yaml:6:1: signers: is written twice (first at line 3)"},
		{"wrong type", secretsBelow + "lease:\n  duration: \"$PASSPHRASE\"\nwriter:\n  workers: \"0x$KEY\"\n", "lease.duration: must be a duration"},
		{"refused value", secretsBelow + "chain:\n  rpcUrl: \"postgres://txm:$PASSWORD@db.example/txm\"\n", "chain.rpcUrl: is not a JSON-RPC URL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(fill(tc.yaml)), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0])
			cmd.Env = append(os.Environ(), runMainArgs+"=-conf\t"+path)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			t.Logf("stdout:\n%s", stdout.String())
			t.Logf("stderr:\n%s", stderr.String())
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("the service did not exit with status 1: %v", err)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("the error does not say %q", tc.want)
			}
			for _, secret := range []string{rawKey, passphrase, password} {
				for name, out := range map[string]string{"stdout": stdout.String(), "stderr": stderr.String()} {
					if strings.Contains(out, secret) {
						t.Errorf("%s holds a secret of the file", name)
					}
				}
			}
		})
	}
}
