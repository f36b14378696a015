package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// serviceCommand is this test binary run as the service with args, in an environment
// holding none of the variables the configuration reads but those given: the developer's
// own DATABASE_URL must not change what a test runs against.
func serviceCommand(ctx context.Context, env map[string]string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, os.Args[0])
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(conf.EnvironmentVariables(), name) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, runMainArgs+"="+strings.Join(args, "\t"))
	return cmd
}

// closedAddr is an address where connections are refused.
func closedAddr(t *testing.T) string {
	t.Helper()
	return testsupport.RefusingAddr(t)
}

// Each way the service refuses to start exits with a status that says so and an error
// naming what to change; -migrate-only migrates and exits 0.
func TestExitStatusAndMessage(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Close() })
	freshDSN, migrationDSN := pgtest.NewDatabase(t), pgtest.NewDatabase(t)
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		// want is what stderr (an error) or stdout (a success's log) must say.
		want string
		// migrated is a database the run must have left with the schema.
		migrated string
	}{
		{name: "an unknown flag", args: []string{"-nope"}, code: 2, want: "flag provided but not defined: -nope"},
		{name: "migrate-only without a database", args: []string{"-migrate-only"}, code: 1,
			want: "txmanager-service: -migrate-only needs DATABASE_URL or DATABASE_MIGRATION_URL"},
		{name: "a port in use", env: map[string]string{"HTTP_ADDR": busy.Addr().String(), "DATABASE_URL": "postgres://nobody@" + closedAddr(t) + "/none"}, code: 1,
			want: "listen on server.http.addr"},
		{name: "no database and no PostgreSQL to start one", env: map[string]string{"PG_BINDIR": t.TempDir(), "HTTP_ADDR": "127.0.0.1:0", "GRPC_ADDR": "127.0.0.1:0"},
			code: 1, want: "no DATABASE_URL and no local PostgreSQL could be started"},
		{name: "migrate-only on a database that does not answer", env: map[string]string{"DATABASE_URL": "postgres://nobody@" + closedAddr(t) + "/none?connect_timeout=2"},
			args: []string{"-migrate-only"}, code: 1, want: "txmanager-service:"},
		{name: "migrate-only", env: map[string]string{"DATABASE_URL": freshDSN}, args: []string{"-migrate-only"}, want: `"msg":"database migrated"`, migrated: freshDSN},
		{name: "migrate-only with the migration role's URL", env: map[string]string{"DATABASE_MIGRATION_URL": migrationDSN}, args: []string{"-migrate-only"},
			want: `"msg":"database migrated"`, migrated: migrationDSN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := serviceCommand(ctx, tt.env, tt.args...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				code = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			out := stdout.String()
			if tt.code != 0 {
				out = stderr.String()
			}
			if code != tt.code || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d, output %q; want exit %d saying %q (stderr %q)", code, out, tt.code, tt.want, stderr.String())
			}
			if tt.migrated != "" {
				db, err := pgx.Connect(ctx, tt.migrated)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close(ctx)
				var n int
				if err := db.QueryRow(ctx, "SELECT count(*) FROM managed_tx").Scan(&n); err != nil {
					t.Fatalf("no schema after -migrate-only: %v", err)
				}
			}
		})
	}
}

// lineWatcher collects a process's output lines and says when one holding a text came.
type lineWatcher struct {
	mu    sync.Mutex
	lines []string
	wake  chan struct{}
}

func watchLines(r io.Reader) *lineWatcher {
	w := &lineWatcher{wake: make(chan struct{}, 1)}
	go func() {
		scanner := bufio.NewScanner(r)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			w.mu.Lock()
			w.lines = append(w.lines, scanner.Text())
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}()
	return w
}

// waitFor returns the first line holding text, or "" once ctx ends.
func (w *lineWatcher) waitFor(ctx context.Context, text string) string {
	for {
		w.mu.Lock()
		for _, line := range w.lines {
			if strings.Contains(line, text) {
				w.mu.Unlock()
				return line
			}
		}
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return ""
		case <-w.wake:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (w *lineWatcher) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n")
}

// The service started on a database and the embedded chain serves on the ports the kernel
// gave it, says where, and on SIGTERM stops everything it started and exits 0.
func TestServesUntilTerminated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := serviceCommand(ctx, map[string]string{
		"DATABASE_URL": testsupport.MigratedDSN(t), "HTTP_ADDR": "127.0.0.1:0", "GRPC_ADDR": "127.0.0.1:0",
	})
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := watchLines(stdout)
	serving := out.waitFor(ctx, `"msg":"serving"`)
	if serving == "" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("the service never said where it serves; stdout:\n%s\nstderr:\n%s", out, stderr.String())
	}
	var addrs struct {
		HTTP string `json:"http_addr"`
	}
	if err := json.Unmarshal([]byte(serving), &addrs); err != nil || strings.HasSuffix(addrs.HTTP, ":0") {
		t.Fatalf("serving line %q: %v, want the bound HTTP address", serving, err)
	}
	ready := false
	for !ready && ctx.Err() == nil {
		resp, err := http.Get("http://" + addrs.HTTP + "/readyz")
		if err != nil {
			t.Fatalf("the address it named does not answer: %v", err)
		}
		_ = resp.Body.Close()
		ready = resp.StatusCode == http.StatusOK
		time.Sleep(50 * time.Millisecond)
	}
	if !ready {
		t.Fatalf("never ready; stdout:\n%s", out)
	}
	// Right after the serving line, before the banner: Kratos installs its own signal
	// handler only after both are written, and the service must stop gracefully anyway.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("after SIGTERM: %v; stderr:\n%s", err, stderr.String())
	}
	if out.waitFor(ctx, `"msg":"stopped"`) == "" {
		t.Errorf("no last line saying it stopped; stdout:\n%s", out)
	}
}

// The chain a database's existing rows belong to is the one chain the configuration names
// (in either form), and none when it names several.
func TestConfiguredChainID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bc   conf.Bootstrap
		want uint64
	}{
		{"the single-chain form", conf.Bootstrap{Chain: conf.Chain{ID: 5}}, 5},
		{"one chain in the list", conf.Bootstrap{Chain: conf.Chain{ID: 5}, Chains: []conf.Chain{{ID: 7}}}, 7},
		{"several chains", conf.Bootstrap{Chains: []conf.Chain{{ID: 7}, {ID: 8}}}, 0},
	}
	for _, tt := range tests {
		if got := configuredChainID(&tt.bc); got != tt.want {
			t.Errorf("%s: %d, want %d", tt.name, got, tt.want)
		}
	}
}

// A stop signal is honoured gracefully at whatever stage of the start it finds the
// process: while it migrates, and right after it says it serves (before Kratos has its own
// signal handler). Either way the process exits 0 by itself, never by the signal's
// default action.
func TestStopSignalDuringStartIsGraceful(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, at string
		// wantStopped: the service ran, so it says it stopped.
		wantStopped bool
	}{
		{name: "after the migration", at: `"msg":"database migrated"`},
		{name: "as soon as it serves", at: `"msg":"serving"`, wantStopped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := serviceCommand(ctx, map[string]string{
				"DATABASE_URL": testsupport.MigratedDSN(t), "HTTP_ADDR": "127.0.0.1:0", "GRPC_ADDR": "127.0.0.1:0",
			})
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			out := watchLines(stdout)
			if out.waitFor(ctx, tc.at) == "" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("never logged %s; stdout:\n%s", tc.at, out)
			}
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("after SIGTERM at %s: %v (want exit 0 by itself); stderr:\n%s", tc.at, err, stderr.String())
			}
			if tc.wantStopped && out.waitFor(ctx, `"msg":"stopped"`) == "" {
				t.Errorf("no last line saying it stopped; stdout:\n%s", out)
			}
		})
	}
}
