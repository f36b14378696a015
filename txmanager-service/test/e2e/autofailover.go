package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/txmanager"
)

// FailoverCluster is a pg_auto_failover formation on loopback, as a managed PostgreSQL
// service runs one: a monitor and two PostgreSQL nodes, one primary and one hot standby,
// each supervised by its own pg_autoctl keeper. Every keeper is a child of this process
// (run as the postgres user when this process is root), so a node can be killed the way a
// machine dies and started again, and the monitor promotes the standby by itself.
type FailoverCluster struct {
	dir        string
	ownedDir   bool
	binDir     string
	autoctl    string
	credential *syscall.Credential
	env        []string
	monitor    *child
	monitorDSN string
	Nodes      []*FailoverNode
}

// FailoverNode is one PostgreSQL node of the formation.
type FailoverNode struct {
	Name   string
	Port   int
	pgdata string
	keeper *child // nil while killed
}

// FailoverOptions shapes the formation.
type FailoverOptions struct {
	// Dir holds the data folders and logs; empty means a temporary folder Stop removes. It
	// must be empty or absent.
	// The servers run as the postgres user when this process is root, so Dir's parents
	// must let that user through.
	Dir string
	// Asynchronous takes the standbys out of the replication quorum: a commit returns
	// without waiting for the standby, as on most cloud read replicas. Otherwise every
	// commit waits until the standby has it (pg_auto_failover's default).
	Asynchronous bool
}

// monitorTuning shortens pg_auto_failover's failure detection (defaults: about 50 s from a
// crash to a promotion) so a run can go through several failovers in minutes. The WAL
// threshold lets a standby that lags be promoted anyway, as an operator of an
// asynchronous cluster chooses when the primary is gone for good: that is the case where
// commits are lost.
var monitorTuning = map[string]string{
	"pgautofailover.health_check_period":               "1000",
	"pgautofailover.health_check_timeout":              "1000",
	"pgautofailover.health_check_max_retries":          "1",
	"pgautofailover.health_check_retry_delay":          "500",
	"pgautofailover.node_considered_unhealthy_timeout": "4000",
	"pgautofailover.primary_demote_timeout":            "8000",
	"pgautofailover.startup_grace_period":              "5000",
	"pgautofailover.promote_wal_log_threshold":         "2147483647",
}

// StartFailoverCluster creates the monitor, the first node (the primary) and the second
// (its standby) and returns once the formation reports one primary and one secondary.
func StartFailoverCluster(ctx context.Context, opts FailoverOptions) (*FailoverCluster, error) {
	autoctl, err := exec.LookPath("pg_autoctl")
	if err != nil {
		return nil, errors.New("pg_autoctl not found: install pg_auto_failover (sudo apt-get install postgresql-15-auto-failover)")
	}
	binDir, err := pglocal.FindBinDir()
	if err != nil {
		return nil, err
	}
	credential, err := pglocal.ServerCredential()
	if err != nil {
		return nil, err
	}
	if opts.Dir != "" {
		// pg_autoctl keeps state under it (configuration, monitor URI): an earlier
		// formation's would be picked up by this one's nodes.
		if entries, err := os.ReadDir(opts.Dir); err == nil && len(entries) > 0 {
			return nil, fmt.Errorf("formation folder %s is not empty: remove it or name another", opts.Dir)
		}
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-autofailover-")
	if err != nil {
		return nil, err
	}
	if credential != nil {
		// The keepers write their data folders, configuration and pid files under it.
		if err := os.Chown(dir, int(credential.Uid), int(credential.Gid)); err != nil {
			return nil, fmt.Errorf("chown %s: %w", dir, err)
		}
	}
	c := &FailoverCluster{dir: dir, ownedDir: owned, binDir: binDir, autoctl: autoctl, credential: credential}
	c.env = append(os.Environ(),
		"PATH="+binDir+":"+os.Getenv("PATH"),
		"HOME="+dir,
		"XDG_CONFIG_HOME="+filepath.Join(dir, "config"),
		"XDG_DATA_HOME="+filepath.Join(dir, "share"),
		"XDG_RUNTIME_DIR="+filepath.Join(dir, "run"),
	)
	if err := c.startMonitor(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	for _, name := range []string{"node_a", "node_b"} {
		if err := c.createNode(ctx, name); err != nil {
			c.Stop()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx, 2*time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	if opts.Asynchronous {
		for _, n := range c.Nodes {
			if err := c.monitorExec(ctx, "SELECT pgautofailover.set_node_replication_quorum('default', $1, false)", n.Name); err != nil {
				c.Stop()
				return nil, fmt.Errorf("asynchronous replication for %s: %w", n.Name, err)
			}
		}
		if err := c.waitPrimarySetting(ctx, "synchronous_standby_names", "", time.Minute); err != nil {
			c.Stop()
			return nil, err
		}
	} else if err := c.waitPrimarySetting(ctx, "synchronous_standby_names", "ANY 1", time.Minute); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// DSN reaches database on whichever node is the primary: libpq's (and pgx's) multi-host
// form, which tries the hosts in order and keeps the one that accepts writes.
func (c *FailoverCluster) DSN(database string) string {
	hosts := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		hosts[i] = fmt.Sprintf("127.0.0.1:%d", n.Port)
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write&connect_timeout=2", strings.Join(hosts, ","), database)
}

// NodeDSN reaches database on one node, primary or standby.
func (c *FailoverCluster) NodeDSN(n *FailoverNode, database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", n.Port, database)
}

// Roles reads the monitor's view: each node's reported and assigned state.
func (c *FailoverCluster) Roles(ctx context.Context) (map[string][2]string, error) {
	conn, err := pgx.Connect(ctx, c.monitorDSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, "SELECT nodename, reportedstate::text, goalstate::text FROM pgautofailover.node")
	if err != nil {
		return nil, err
	}
	out := map[string][2]string{}
	for rows.Next() {
		var name, reported, goal string
		if err := rows.Scan(&name, &reported, &goal); err != nil {
			return nil, err
		}
		out[name] = [2]string{reported, goal}
	}
	return out, rows.Err()
}

// Primary is the node the monitor has as primary, settled (reported = assigned).
func (c *FailoverCluster) Primary(ctx context.Context) (*FailoverNode, error) {
	roles, err := c.Roles(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if r := roles[n.Name]; r[0] == r[1] && (r[0] == "primary" || r[0] == "single" || r[0] == "wait_primary") {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no settled primary: %v", roles)
}

// Standby is the node other than the primary.
func (c *FailoverCluster) Standby(ctx context.Context) (*FailoverNode, error) {
	primary, err := c.Primary(ctx)
	if err != nil {
		return nil, err
	}
	for _, n := range c.Nodes {
		if n != primary {
			return n, nil
		}
	}
	return nil, errors.New("no standby")
}

// WaitHealthy waits until every node runs and the formation has settled on one primary and
// one secondary.
func (c *FailoverCluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	var last map[string][2]string
	err := poll(ctx, timeout, func() (bool, error) {
		for _, n := range c.Nodes {
			if n.keeper != nil {
				select {
				case <-n.keeper.exited:
					return false, n.keeper.exitedEarly()
				default:
				}
			}
		}
		// The monitor may not answer for a moment: ask again at the next poll.
		roles, err := c.Roles(ctx)
		if err == nil {
			last = roles
		}
		primaries, secondaries := 0, 0
		for _, n := range c.Nodes {
			switch r := roles[n.Name]; {
			case r[0] != r[1]:
			case r[0] == "primary":
				primaries++
			case r[0] == "secondary":
				secondaries++
			}
		}
		return primaries == 1 && secondaries == len(c.Nodes)-1, nil
	})
	if errors.Is(err, errPollTimeout) {
		return fmt.Errorf("formation not healthy after %s: %v (logs in %s)", timeout, last, c.dir)
	}
	return err
}

// WaitForNewPrimary waits until a node other than old is the settled primary.
func (c *FailoverCluster) WaitForNewPrimary(ctx context.Context, old *FailoverNode, timeout time.Duration) error {
	err := poll(ctx, timeout, func() (bool, error) {
		p, err := c.Primary(ctx)
		return err == nil && p != old, nil
	})
	if errors.Is(err, errPollTimeout) {
		roles, rolesErr := c.Roles(ctx)
		if rolesErr != nil {
			return fmt.Errorf("no primary other than %s within %s; the monitor: %w", old.Name, timeout, rolesErr)
		}
		return fmt.Errorf("no primary other than %s within %s: %v", old.Name, timeout, roles)
	}
	return err
}

// PlannedFailover asks the monitor to promote the standby (a maintenance switchover: the
// standby catches up first, so nothing committed is lost).
func (c *FailoverCluster) PlannedFailover(ctx context.Context) error {
	var err error
	for try := range 5 {
		err = c.monitorExec(ctx, "SELECT pgautofailover.perform_failover('default', 0)")
		// The monitor's function can deadlock with the keepers' concurrent state reports;
		// nothing was changed then, so it is asked again.
		if state := txmanager.SQLState(err); state != "40P01" && state != "40001" {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(try+1) * 200 * time.Millisecond):
		}
	}
	return err
}

// Kill ends a node the way a machine dies: its keeper and its postmaster get SIGKILL at
// once (the backends follow the postmaster), so nothing is shut down cleanly.
func (c *FailoverCluster) Kill(n *FailoverNode) error {
	postmaster, err := postmasterPID(n.pgdata)
	if err != nil {
		return err
	}
	if n.keeper != nil {
		// The keeper's own helper processes are in its process group.
		_ = syscall.Kill(-n.keeper.cmd.Process.Pid, syscall.SIGKILL)
		n.keeper.kill()
		n.keeper = nil
	}
	if err := syscall.Kill(postmaster, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill %s's postmaster: %w", n.Name, err)
	}
	return nil
}

// Restart starts a killed node's keeper again; it rejoins the formation (as a standby of
// whichever node was promoted, rewinding what it had that the new primary has not).
func (c *FailoverCluster) Restart(n *FailoverNode) error {
	if n.keeper != nil {
		return fmt.Errorf("%s is running", n.Name)
	}
	keeper, err := c.startKeeper(n.Name, "run", "--pgdata", n.pgdata)
	if err != nil {
		return err
	}
	n.keeper = keeper
	return nil
}

// PauseReplication freezes the standby's WAL receiver (SIGSTOP): the standby falls behind
// while it still looks healthy to the monitor. The returned drop discards what the
// receiver holds but has not written (SIGKILL; the standby restarts it), for a primary
// that dies meanwhile; resume lets it go on instead.
func (c *FailoverCluster) PauseReplication(ctx context.Context, standby *FailoverNode) (drop, resume func() error, err error) {
	conn, err := pgx.Connect(ctx, c.NodeDSN(standby, "postgres"))
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pid FROM pg_stat_wal_receiver").Scan(&pid); err != nil {
		return nil, nil, fmt.Errorf("%s's WAL receiver: %w", standby.Name, err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return nil, nil, fmt.Errorf("pause the WAL receiver: %w", err)
	}
	drop = func() error { return syscall.Kill(pid, syscall.SIGKILL) }
	resume = func() error { return syscall.Kill(pid, syscall.SIGCONT) }
	return drop, resume, nil
}

// Stop stops every keeper (each stops its PostgreSQL) and the monitor, and removes the
// folder it made.
func (c *FailoverCluster) Stop() {
	for _, n := range c.Nodes {
		if n.keeper != nil {
			_ = n.keeper.stop(syscall.SIGINT, 20*time.Second)
			n.keeper = nil
		}
		// A killed node's postmaster may outlive its keeper for a moment.
		if pid, err := postmasterPID(n.pgdata); err == nil {
			_ = syscall.Kill(pid, syscall.SIGQUIT)
		}
	}
	if c.monitor != nil {
		_ = c.monitor.stop(syscall.SIGINT, 20*time.Second)
		c.monitor = nil
	}
	if c.ownedDir {
		_ = os.RemoveAll(c.dir)
	}
}

func (c *FailoverCluster) startKeeper(name string, args ...string) (*child, error) {
	return startChildAs("pg_autoctl "+name, filepath.Join(c.dir, name+".log"), c.env, c.credential, c.autoctl, args...)
}

// startMonitor creates and runs the monitor.
func (c *FailoverCluster) startMonitor(ctx context.Context) error {
	err := startOnFreePort(func(port int) error {
		pgdata := filepath.Join(c.dir, "monitor")
		_ = os.RemoveAll(pgdata)
		keeper, err := c.startKeeper("monitor", "create", "monitor", "--pgdata", pgdata, "--pgport", strconv.Itoa(port),
			"--pgctl", filepath.Join(c.binDir, "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--run")
		if err != nil {
			return err
		}
		dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable&connect_timeout=2", port)
		if err := c.waitServing(ctx, keeper, dsn, "SELECT count(*) FROM pgautofailover.formation"); err != nil {
			_ = keeper.stop(syscall.SIGINT, 10*time.Second)
			return err
		}
		c.monitor, c.monitorDSN = keeper, dsn
		return nil
	})
	if err != nil {
		return err
	}
	for name, value := range monitorTuning {
		if err := c.monitorExec(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = '%s'", name, value)); err != nil {
			return fmt.Errorf("monitor setting %s: %w", name, err)
		}
	}
	return c.monitorExec(ctx, "SELECT pg_reload_conf()")
}

// createNode creates a node and waits until it runs PostgreSQL: the first becomes the
// primary, the next one its standby.
func (c *FailoverCluster) createNode(ctx context.Context, name string) error {
	err := startOnFreePort(func(port int) error {
		pgdata := filepath.Join(c.dir, name)
		_ = os.RemoveAll(pgdata)
		keeper, err := c.startKeeper(name, "create", "postgres", "--pgdata", pgdata, "--pgport", strconv.Itoa(port), "--name", name,
			"--pgctl", filepath.Join(c.binDir, "pg_ctl"), "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl",
			"--monitor", strings.Replace(c.monitorDSN, "postgres://postgres@", "postgres://autoctl_node@", 1), "--run")
		if err != nil {
			return err
		}
		n := &FailoverNode{Name: name, Port: port, pgdata: pgdata, keeper: keeper}
		if err := c.waitServing(ctx, keeper, c.NodeDSN(n, "postgres"), "SELECT 1"); err != nil {
			_ = keeper.stop(syscall.SIGINT, 10*time.Second)
			return err
		}
		c.Nodes = append(c.Nodes, n)
		return nil
	})
	if err != nil || len(c.Nodes) > 1 {
		return err
	}
	// The standby is created from the primary: the formation settles before it joins.
	return c.waitRole(ctx, name, "single", 2*time.Minute)
}

// startOnFreePort runs start on a free port, and on another one when something took that
// port first: PostgreSQL cannot listen on port 0.
func startOnFreePort(start func(port int) error) error {
	var err error
	for range 5 {
		var port int
		if port, err = pglocal.FreePort(); err != nil {
			return err
		}
		if err = start(port); err == nil || !pglocal.LostPortRace(err) {
			return err
		}
	}
	return err
}

func (c *FailoverCluster) waitRole(ctx context.Context, name, state string, timeout time.Duration) error {
	var roles map[string][2]string
	err := poll(ctx, timeout, func() (bool, error) {
		var err error
		roles, err = c.Roles(ctx)
		return err == nil && roles[name][0] == state && roles[name][1] == state, nil
	})
	if errors.Is(err, errPollTimeout) {
		return fmt.Errorf("%s not %s after %s: %v", name, state, timeout, roles)
	}
	return err
}

// waitPrimarySetting waits until the primary's setting starts with want (empty: is empty);
// the keeper applies what the monitor assigns.
func (c *FailoverCluster) waitPrimarySetting(ctx context.Context, name, want string, timeout time.Duration) error {
	var got string
	var readErr error
	err := poll(ctx, timeout, func() (bool, error) {
		primary, err := c.Primary(ctx)
		if err == nil {
			var conn *pgx.Conn
			if conn, err = pgx.Connect(ctx, c.NodeDSN(primary, "postgres")); err == nil {
				err = conn.QueryRow(ctx, "SELECT current_setting($1)", name).Scan(&got)
				conn.Close(context.WithoutCancel(ctx))
			}
		}
		readErr = err
		return err == nil && strings.HasPrefix(got, want) && (want != "" || got == ""), nil
	})
	switch {
	case !errors.Is(err, errPollTimeout):
		return err
	case readErr != nil:
		return fmt.Errorf("primary's %s not read within %s: %w", name, timeout, readErr)
	default:
		return fmt.Errorf("primary's %s is %q, not %q, after %s", name, got, want, timeout)
	}
}

// waitServing waits until query succeeds on dsn, or the keeper exits.
func (c *FailoverCluster) waitServing(ctx context.Context, keeper *child, dsn, query string) error {
	var lastErr error
	err := poll(ctx, 2*time.Minute, func() (bool, error) {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			_, err = conn.Exec(ctx, query)
			conn.Close(context.WithoutCancel(ctx))
		}
		if lastErr = err; err == nil {
			return true, nil
		}
		select {
		case <-keeper.exited:
			return false, keeper.exitedEarly()
		default:
			return false, nil
		}
	})
	if errors.Is(err, errPollTimeout) {
		return fmt.Errorf("%s not serving after 2m: %w; log tail:\n%s", keeper.name, lastErr, tailFile(keeper.logPath, 20))
	}
	return err
}

// errPollTimeout: poll's condition did not hold within its timeout.
var errPollTimeout = errors.New("timed out")

// poll calls check every 250 ms until it reports done, fails, the timeout passes
// (errPollTimeout) or ctx ends.
func poll(ctx context.Context, timeout time.Duration, check func() (done bool, err error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := check()
		if done || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return errPollTimeout
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (c *FailoverCluster) monitorExec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, c.monitorDSN)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func postmasterPID(pgdata string) (int, error) {
	data, err := os.ReadFile(filepath.Join(pgdata, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("postmaster pid: %w", err)
	}
	first, _, _ := strings.Cut(string(data), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}
