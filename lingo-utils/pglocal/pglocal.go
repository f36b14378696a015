// Package pglocal finds a PostgreSQL server to develop and test against, or starts a
// throwaway cluster from the PostgreSQL binaries installed on the machine.
//
// The throwaway cluster runs as a direct child process of the caller (the postmaster is
// started without pg_ctl so that it is never re-parented to PID 1) and dies with it: the
// caller must Stop it, and the kernel sends it SIGQUIT if the caller dies first.
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultLocalDSN is the server a developer machine usually has: trust auth on loopback.
// The connect timeout is for a server that accepts and never answers; an absent one refuses
// at once. 10 s, not less: with every test package of `make test` on two cores, a backend
// has taken over 2 s to start, and a test then failed on connecting, not on what it checks.
const DefaultLocalDSN = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=10"

// ErrNoBinaries means no PostgreSQL server binaries (initdb, postgres) are installed.
var ErrNoBinaries = errors.New("pglocal: PostgreSQL server binaries not found (install the Debian package `postgresql`, or set PG_BINDIR)")

// Cluster is a throwaway PostgreSQL cluster owned by this process.
type Cluster struct {
	// DSN connects as the superuser `postgres` to the `postgres` database.
	DSN string

	*serverProcess
}

// ClusterOptions tunes StartCluster. The zero value is usable.
type ClusterOptions struct {
	// BinDir holds initdb and postgres; empty means discover (PG_BINDIR, Debian layout, PATH).
	BinDir string
	// Port to listen on at 127.0.0.1; 0 picks a free one.
	Port int
	// Durable keeps fsync on. Tests and local runs do not need it.
	Durable bool
	// StartTimeout bounds initdb plus server start-up; 0 means 60s.
	StartTimeout time.Duration
	// Settings are further server settings as name=value, passed as -c on the command line
	// (after the defaults, so they win): those only a start can set, such as
	// shared_preload_libraries, are why a caller needs a cluster of its own.
	Settings []string
}

// FindBinDir returns the directory holding initdb and postgres.
func FindBinDir() (string, error) {
	if dir := os.Getenv("PG_BINDIR"); dir != "" {
		if isServerBinDir(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("PG_BINDIR=%s has no initdb/postgres: %w", dir, ErrNoBinaries)
	}
	// Debian keeps the server binaries off PATH, one folder per major version; prefer the newest.
	candidates, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(candidates, func(i, j int) bool {
		return majorOf(candidates[i]) > majorOf(candidates[j])
	})
	for _, dir := range candidates {
		if isServerBinDir(dir) {
			return dir, nil
		}
	}
	if path, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(path)
		if isServerBinDir(dir) {
			return dir, nil
		}
	}
	return "", ErrNoBinaries
}

func majorOf(binDir string) int {
	major, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return major
}

func isServerBinDir(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		if info, err := os.Stat(filepath.Join(dir, name)); err != nil || info.IsDir() {
			return false
		}
	}
	return true
}

// StartCluster initialises a new cluster in a temporary folder and starts its postmaster on
// loopback. initdb refuses to run as root, so under root both run as the `postgres` user.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	binDir := opts.BinDir
	if binDir == "" {
		found, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		binDir = found
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	credential, err := ServerCredential()
	if err != nil {
		return nil, err
	}
	if opts.Port != 0 {
		return startOnce(ctx, binDir, credential, opts, opts.Port)
	}
	// PostgreSQL cannot listen on port 0, so a free port is picked for it, and another
	// process may take it before the postmaster binds: then try another one.
	for attempt := 1; ; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		c, err := startOnce(ctx, binDir, credential, opts, port)
		if err == nil || attempt == maxPortAttempts || !LostPortRace(err) {
			return c, err
		}
	}
}

// maxPortAttempts bounds the retries when another process takes the picked port first.
const maxPortAttempts = 5

// LostPortRace: the server found its FreePort taken ("could not bind IPv4 address ...:
// Address already in use").
func LostPortRace(err error) bool {
	return strings.Contains(err.Error(), "could not bind") || strings.Contains(err.Error(), "already in use")
}

// startOnce initialises a cluster in a new folder and starts it on port; on failure the
// folder is gone.
func startOnce(ctx context.Context, binDir string, credential *syscall.Credential, opts ClusterOptions, port int) (*Cluster, error) {
	dir, err := newServerDir("pglocal-", credential)
	if err != nil {
		return nil, err
	}
	dataDir := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"),
		"-D", dataDir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: credential}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pglocal: initdb: %w: %s", err, strings.TrimSpace(string(out)))
	}
	args := []string{"-D", dataDir, "-p", strconv.Itoa(port), "-h", "127.0.0.1", "-k", dir,
		"-c", "max_connections=400", "-c", "shared_buffers=128MB"}
	if !opts.Durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	for _, setting := range opts.Settings {
		args = append(args, "-c", setting)
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"), args...)
	// SIGQUIT is PostgreSQL's immediate shutdown: if this process dies without calling Stop,
	// the postmaster and its backends go with it instead of lingering as orphans. Its own
	// process group keeps a terminal's Ctrl-C from reaching it before the owner has shut
	// down cleanly (and still needs the database to do so).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	process, err := startServer("postgres", dir, "postgres.log", cmd)
	if err != nil {
		return nil, err
	}
	c := &Cluster{DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port), serverProcess: process}
	if err := c.waitAccepting(ctx, c.DSN, 100*time.Millisecond); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

// Stop shuts the cluster down (fast shutdown, then kill after 20s), waits for the postmaster
// to exit and removes its folder. It is safe to call more than once.
func (c *Cluster) Stop() error { return c.stop(20 * time.Second) }

// Probe connects to dsn and runs a trivial query.
func Probe(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// ServerCredential is the user PostgreSQL's programs run as: this process's own, or the
// postgres user when this process is root (the servers refuse to run as root).
func ServerCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pglocal: running as root needs a `postgres` user to run initdb: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort is a loopback port that was free a moment ago, for a server that cannot bind
// port 0 itself; its caller retries on LostPortRace.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pglocal: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
