package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrNoPgBouncer means the pgbouncer binary is not installed.
var ErrNoPgBouncer = errors.New("pglocal: pgbouncer not found (install the Debian package `pgbouncer`: apt-get install pgbouncer)")

// PgBouncer is a PgBouncer process owned by this process, pooling connections to one
// upstream server. Like a Cluster it is a direct child that dies with its owner.
type PgBouncer struct {
	// Addr is the loopback host:port PgBouncer listens on.
	Addr string
	// PoolMode is the pool_mode it runs with.
	PoolMode string

	user string
	*serverProcess
}

// PgBouncerOptions tunes StartPgBouncer. Only Upstream is required.
type PgBouncerOptions struct {
	// Upstream is a DSN of the real server. Its host, port, user and password are what
	// PgBouncer connects with; the database name is only used to probe readiness.
	Upstream string
	// PoolMode is session, transaction or statement; empty means transaction, the mode
	// Supabase's transaction pooler runs.
	PoolMode string
	// BinPath is the pgbouncer binary; empty means PATH, then /usr/sbin (Debian).
	BinPath string
	// PoolSize is default_pool_size: server connections per (database, user); 0 means 20.
	PoolSize int
	// MaxClientConn is max_client_conn; 0 means 1000.
	MaxClientConn int
	// StartTimeout bounds start-up until a query through PgBouncer answers; 0 means 30s.
	StartTimeout time.Duration
}

// FindPgBouncer returns the path of the pgbouncer binary, or ErrNoPgBouncer.
func FindPgBouncer() (string, error) {
	if path, err := exec.LookPath("pgbouncer"); err == nil {
		return path, nil
	}
	// Debian installs it in /usr/sbin, which a non-root PATH often lacks.
	const debian = "/usr/sbin/pgbouncer"
	if info, err := os.Stat(debian); err == nil && !info.IsDir() {
		return debian, nil
	}
	return "", ErrNoPgBouncer
}

// StartPgBouncer starts PgBouncer on a free loopback port in front of opts.Upstream and
// returns once a query through it answers. Any database name passes through to the
// upstream server, and clients authenticate with trust: PgBouncer logs in upstream with the
// user's password from opts.Upstream, if it has one. PgBouncer refuses to run as root, so
// under root it runs as the `postgres` user, like StartCluster.
func StartPgBouncer(ctx context.Context, opts PgBouncerOptions) (*PgBouncer, error) {
	bin := opts.BinPath
	if bin == "" {
		found, err := FindPgBouncer()
		if err != nil {
			return nil, err
		}
		bin = found
	} else if info, err := os.Stat(bin); err != nil || info.IsDir() {
		return nil, fmt.Errorf("%w: BinPath %s", ErrNoPgBouncer, bin)
	}
	upstream, err := pgconn.ParseConfig(opts.Upstream)
	if err != nil {
		// pgconn's message may quote the DSN, password included.
		return nil, errors.New("pglocal: pgbouncer upstream is not a valid PostgreSQL connection string")
	}
	poolMode := opts.PoolMode
	if poolMode == "" {
		poolMode = "transaction"
	}
	switch poolMode {
	case "session", "transaction", "statement":
	default:
		return nil, fmt.Errorf("pglocal: unknown pgbouncer pool mode %q", poolMode)
	}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	credential, err := ServerCredential()
	if err != nil {
		return nil, err
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := newServerDir("pgbouncer-", credential)
	if err != nil {
		return nil, err
	}
	iniPath, userlistPath := filepath.Join(dir, "pgbouncer.ini"), filepath.Join(dir, "userlist.txt")
	files := map[string]string{
		userlistPath: quoteUserlist(upstream.User) + " " + quoteUserlist(upstream.Password) + "\n",
		iniPath: pgbouncerINI(upstream, pgbouncerSettings{
			port:          port,
			authFile:      userlistPath,
			poolMode:      poolMode,
			poolSize:      orDefault(opts.PoolSize, 20),
			maxClientConn: orDefault(opts.MaxClientConn, 1000),
		}),
	}
	for path, content := range files {
		if err := writeOwnedFile(path, content, credential); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}

	cmd := exec.Command(bin, iniPath)
	// SIGTERM is PgBouncer's immediate shutdown: if this process dies without calling Stop,
	// PgBouncer goes with it. It stays a direct child (never -d) because PID 1 here does not
	// reap orphans; its own process group keeps a terminal's Ctrl-C for the owner.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: credential, Pdeathsig: syscall.SIGTERM, Setpgid: true}
	process, err := startServer("pgbouncer", dir, "pgbouncer.log", cmd)
	if err != nil {
		return nil, err
	}
	b := &PgBouncer{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolMode: poolMode, user: upstream.User, serverProcess: process}
	if err := b.waitReady(ctx, upstream.Database); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

type pgbouncerSettings struct {
	port          int
	authFile      string
	poolMode      string
	poolSize      int
	maxClientConn int
}

func pgbouncerINI(upstream *pgconn.Config, s pgbouncerSettings) string {
	// pgx sends no startup parameter PgBouncer rejects unless the DSN adds one; other
	// drivers send extra_float_digits (JDBC, psycopg) and options (search_path and the like,
	// which a transaction pooler cannot keep per client anyway).
	return fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = %d
ignore_startup_parameters = extra_float_digits,options
server_tls_sslmode = %s
log_connections = 0
log_disconnections = 0
`, quoteConnValue(upstream.Host), upstream.Port, s.port, s.authFile, upstream.User, s.poolMode,
		s.poolSize, s.maxClientConn, serverTLSMode(upstream))
}

// serverTLSMode maps the upstream DSN's sslmode onto PgBouncer's server_tls_sslmode: pgconn
// keeps a TLS config for every mode but disable, and a plaintext fallback for prefer/allow.
func serverTLSMode(c *pgconn.Config) string {
	if c.TLSConfig == nil {
		return "disable"
	}
	for _, f := range c.Fallbacks {
		if f.TLSConfig == nil {
			return "prefer"
		}
	}
	return "require"
}

func quoteConnValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

func quoteUserlist(v string) string {
	return `"` + strings.ReplaceAll(v, `"`, `""`) + `"`
}

// writeOwnedFile writes a private file that the PgBouncer process (credential) can read.
func writeOwnedFile(path, content string, credential *syscall.Credential) error {
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		return fmt.Errorf("pglocal: write %s: %w", path, err)
	}
	return chownTo(path, credential)
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

func (b *PgBouncer) waitReady(ctx context.Context, database string) error {
	// The simple protocol: the probe must not rely on a prepared statement surviving
	// between two server round trips, which transaction pooling does not promise.
	dsn := b.DSN(database) + "&default_query_exec_mode=simple_protocol&connect_timeout=1"
	return b.waitAccepting(ctx, dsn, 50*time.Millisecond)
}

// DSN connects through PgBouncer to database on the upstream server, as the upstream user.
func (b *PgBouncer) DSN(database string) string {
	u := url.URL{Scheme: "postgres", User: url.User(b.user), Host: b.Addr, Path: "/" + database, RawQuery: "sslmode=disable"}
	return u.String()
}

// AdminDSN connects to PgBouncer's admin console (the `pgbouncer` database), which speaks
// only the simple query protocol.
func (b *PgBouncer) AdminDSN() string {
	return b.DSN("pgbouncer") + "&default_query_exec_mode=simple_protocol"
}

// Show runs SHOW <what> (POOLS, CLIENTS, SERVERS, STATS, CONFIG, ...) on the admin console
// and returns each row as column name -> text value.
func (b *PgBouncer) Show(ctx context.Context, what string) ([]map[string]string, error) {
	conn, err := pgx.Connect(ctx, b.AdminDSN())
	if err != nil {
		return nil, fmt.Errorf("pglocal: pgbouncer admin console: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return nil, fmt.Errorf("pglocal: pgbouncer SHOW %s: %w", what, err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		row := map[string]string{}
		for i, field := range rows.FieldDescriptions() {
			row[field.Name] = string(rows.RawValues()[i])
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pglocal: pgbouncer SHOW %s: %w", what, err)
	}
	return out, nil
}

// Stop shuts PgBouncer down (safe shutdown, then kill after 10s), waits for it to exit and
// removes its folder. It is safe to call more than once.
func (b *PgBouncer) Stop() error { return b.stop(10 * time.Second) }
