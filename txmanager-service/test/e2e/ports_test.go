package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestAnnouncementParsers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		parse func(string) (string, bool)
		line  string
		want  string // "" means no match
	}{
		{
			name:  "service serving line",
			parse: servingHTTP,
			line:  `{"grpc_addr":"127.0.0.1:40123","http_addr":"127.0.0.1:40121","level":"INFO","msg":"serving","node_id":"node-1","ts":"2026-01-01T00:00:00Z"}`,
			want:  "127.0.0.1:40121 127.0.0.1:40123",
		},
		{
			name:  "service line with another message",
			parse: servingHTTP,
			line:  `{"level":"INFO","msg":"database migrated","applied":0,"note":"serving"}`,
		},
		{
			name:  "service serving line without the gRPC address",
			parse: servingHTTP,
			line:  `{"http_addr":"127.0.0.1:40121","level":"INFO","msg":"serving"}`,
		},
		{
			name:  "banner line is not the machine-readable one",
			parse: servingHTTP,
			line:  `HTTP  http://127.0.0.1:40121`,
		},
		{
			name:  "geth HTTP server",
			parse: parseGethHTTPLine,
			line:  `INFO [11-23|22:55:21.238] HTTP server started                      endpoint=127.0.0.1:36659 auth=false prefix= cors= vhosts=localhost`,
			want:  "http://127.0.0.1:36659",
		},
		{
			name:  "geth authenticated engine API is not the JSON-RPC endpoint",
			parse: parseGethHTTPLine,
			line:  `INFO [11-23|22:55:21.238] HTTP server started                      endpoint=127.0.0.1:8551 auth=true prefix= cors=localhost vhosts=localhost`,
		},
		{
			name:  "geth HTTP server stopped",
			parse: parseGethHTTPLine,
			line:  `INFO [11-23|22:55:28.694] HTTP server stopped                      endpoint=127.0.0.1:36659`,
		},
		{
			name:  "devchain first line",
			parse: parseDevChainLine,
			line:  `dev chain (id 1337) at http://127.0.0.1:43121, a block every 500ms`,
			want:  "http://127.0.0.1:43121",
		},
		{
			name:  "devchain account line",
			parse: parseDevChainLine,
			line:  `  account 0: 0x71562b71999873DB5b286dF957af199Ec94617F7`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := tt.parse(tt.line)
			if ok != (tt.want != "") || got != tt.want {
				t.Errorf("parse(%q) = %q, %t; want %q", tt.line, got, ok, tt.want)
			}
		})
	}
}

// servingHTTP adapts parseServingLine to the table: both addresses, space-separated.
func servingHTTP(line string) (string, bool) {
	addrs, ok := parseServingLine(line)
	if !ok {
		return "", false
	}
	return addrs.HTTP + " " + addrs.GRPC, true
}

// A restarted process appends to its earlier lives' log: the address read back must be
// the one the current life announced, not a stale one above it.
func TestWaitForAnnouncementReadsOnlyTheCurrentLife(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(t.TempDir(), "service.log")
	announce := func(port string) string {
		return `{"level":"INFO","msg":"serving","http_addr":"127.0.0.1:` + port + `","grpc_addr":"127.0.0.1:1` + port + `"}`
	}
	first, err := startChild("test", logPath, os.Environ(), "/bin/sh", "-c", "echo '"+announce("1111")+"'")
	if err != nil {
		t.Fatal(err)
	}
	<-first.exited
	// The second life prints some noise and a partial line first, announcing only later.
	script := "printf 'starting\\n{\"level\":\"INFO\",'; sleep 0.2; echo '\"msg\":\"not yet\"}'; sleep 0.2; echo '" + announce("2222") + "'; exec sleep 30"
	second, err := startChild("test", logPath, os.Environ(), "/bin/sh", "-c", script)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.kill)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	got, err := waitForAnnouncement(ctx, second, "its addresses", parseServingLine)
	if err != nil {
		t.Fatal(err)
	}
	if want := (serviceAddrs{HTTP: "127.0.0.1:2222", GRPC: "127.0.0.1:12222"}); got != want {
		t.Errorf("announced %+v, want %+v", got, want)
	}
}

func TestWaitForAnnouncementFailsWhenTheProcessExits(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(t.TempDir(), "chain.log")
	c, err := startChild("test", logPath, os.Environ(), "/bin/sh", "-c", "echo 'bind: address already in use'; exit 1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.kill)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = waitForAnnouncement(ctx, c, "its JSON-RPC endpoint", parseDevChainLine)
	if err == nil || !strings.Contains(err.Error(), "exited unexpectedly") || !strings.Contains(err.Error(), "address already in use") {
		t.Errorf("error %v, want the early exit with the log tail", err)
	}
}
