package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// Every process this package starts binds port 0 and announces in its output the address
// the kernel gave it; nothing picks a "free" port and hands it on, because another process
// can take such a port (it is in the ephemeral range) before the child binds it.

// waitForAnnouncement waits until a line of c's output from its current life satisfies
// parse, and returns what parse made of it. It fails when c exits first or when ctx ends.
func waitForAnnouncement[T any](ctx context.Context, c *child, what string, parse func(line string) (T, bool)) (T, error) {
	var zero T
	pos := c.logStart
	for {
		// Whether it had exited is read before the log, so a line written just before the
		// exit is still found.
		exited := false
		select {
		case <-c.exited:
			exited = true
		default:
		}
		value, found, next, err := scanLogFrom(c.logPath, pos, parse)
		if err != nil {
			return zero, fmt.Errorf("%s: %s: %w", c.name, what, err)
		}
		if found {
			return value, nil
		}
		pos = next
		if exited {
			return zero, fmt.Errorf("waiting for %s: %w", what, c.exitedEarly())
		}
		select {
		case <-ctx.Done():
			return zero, fmt.Errorf("%s never announced %s: %w; log tail:\n%s", c.name, what, ctx.Err(), tailFile(c.logPath, 30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// scanLogFrom applies parse to the complete lines of the file at path from offset pos on
// and returns the first value it accepts, or the offset of the first line not yet complete.
func scanLogFrom[T any](path string, pos int64, parse func(line string) (T, bool)) (value T, found bool, next int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return value, false, pos, fmt.Errorf("read log: %w", err)
	}
	defer func() { _ = f.Close() }() // read only
	if _, err := f.Seek(pos, io.SeekStart); err != nil {
		return value, false, pos, fmt.Errorf("read log: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return value, false, pos, fmt.Errorf("read log: %w", err)
	}
	for {
		end := bytes.IndexByte(data, '\n')
		if end < 0 {
			return value, false, pos, nil
		}
		line := strings.TrimSpace(string(data[:end]))
		data = data[end+1:]
		pos += int64(end + 1)
		if v, ok := parse(line); ok {
			return v, true, pos, nil
		}
	}
}

// serviceAddrs are the addresses a service process bound.
type serviceAddrs struct {
	HTTP string `json:"http_addr"`
	GRPC string `json:"grpc_addr"`
}

// parseServingLine reads the JSON log line the service writes once its servers listen
// ({"msg":"serving","http_addr":...,"grpc_addr":...}, internal/app).
func parseServingLine(line string) (serviceAddrs, bool) {
	if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"serving"`) {
		return serviceAddrs{}, false
	}
	var entry struct {
		Msg string `json:"msg"`
		serviceAddrs
	}
	if json.Unmarshal([]byte(line), &entry) != nil || entry.Msg != "serving" || entry.HTTP == "" || entry.GRPC == "" {
		return serviceAddrs{}, false
	}
	return entry.serviceAddrs, true
}

// gethHTTPLine matches the line geth logs once its unauthenticated HTTP JSON-RPC server is
// bound: "INFO [..] HTTP server started   endpoint=127.0.0.1:43121 auth=false prefix= ...".
var gethHTTPLine = regexp.MustCompile(`HTTP server started\s+endpoint=(\S+)\s+auth=false\b`)

// parseGethHTTPLine returns the JSON-RPC URL from geth's "HTTP server started" line.
func parseGethHTTPLine(line string) (string, bool) {
	m := gethHTTPLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return "http://" + m[1], true
}

// devChainLine matches the first line txm-devchain prints: "dev chain (id 1337) at
// http://127.0.0.1:43121, a block every 500ms".
var devChainLine = regexp.MustCompile(`^dev chain \(id \d+\) at (http://\S+?),`)

// parseDevChainLine returns the JSON-RPC URL from txm-devchain's first line.
func parseDevChainLine(line string) (string, bool) {
	m := devChainLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return m[1], true
}
