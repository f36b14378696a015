package pglocal

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"
)

// startedServer is a server process this package started and waits on: exited closes once
// Wait has returned, after which *exitErr holds its result.
type startedServer struct {
	name    string
	dsn     string
	exited  <-chan struct{}
	exitErr *error
	logPath string
}

// waitAccepting polls until the server accepts a connection, giving up early with the tail
// of its log when the process dies or ctx ends, so a failed start says why.
func waitAccepting(ctx context.Context, s startedServer, every time.Duration) error {
	for {
		probeCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := Probe(probeCtx, s.dsn)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("pglocal: %s exited during start-up (%v); log: %s", s.name, *s.exitErr, tailFile(s.logPath))
		case <-ctx.Done():
			return fmt.Errorf("pglocal: %s not ready: %w (last error: %v); log: %s", s.name, ctx.Err(), err, tailFile(s.logPath))
		case <-time.After(every):
		}
	}
}

// tailFile returns the last 2000 bytes of a log, enough to show a start-up failure.
func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}
