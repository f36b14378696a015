package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// servingLine is the payouts service's Kratos log line once it listens:
// "INFO ts=... service=payouts msg=serving http_addr=127.0.0.1:40123".
var servingLine = regexp.MustCompile(`msg=serving http_addr=(\S+)`)

// startPayouts starts the example binary with its config and environment, appending its
// output to logPath, and waits until it reports the address it bound (port 0).
func startPayouts(ctx context.Context, bin, confPath, logPath string, env []string) (*e2e.Process, error) {
	return e2e.StartProcess(ctx, e2e.ProcessOptions{
		Name: "payouts", Bin: bin, Args: []string{"-conf", confPath}, Env: env, LogPath: logPath, Announce: servingLine,
	})
}

// payoutsConfig is the example's configuration for the run: its relay claims small batches
// and sends them one at a time, so a kill lands while a batch is in flight.
const payoutsConfig = `server:
  http: {addr: "127.0.0.1:0", timeout: 10s}
database:
  dsn: "${DATABASE_URL:}"
  maxConns: 16
  tx: {isolation: read_committed, timeout: 20s, lockTimeout: 1s}
txmanager:
  endpoints: "${TXMANAGER_ADDR:}"
  callTimeout: 5s
payouts:
  signer: "${PAYOUTS_SIGNER:}"
relay: {interval: 100ms, batchSize: 10, parallelSends: 1, sendTimeout: 10s, retryBackoff: 200ms, maxBackoff: 2s}
consumer: {name: payouts, wait: 2s, page: 20, restartBackoff: 200ms}
`

func writePayoutsConfig(dir string) (string, error) {
	path := filepath.Join(dir, "payouts.yaml")
	if err := os.WriteFile(path, []byte(payoutsConfig), 0o600); err != nil {
		return "", fmt.Errorf("write payouts config: %w", err)
	}
	return path, nil
}
