package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// clusterTiming is short enough for faults to bite within a minute's run.
func clusterTiming() map[string]any {
	return map[string]any{
		"routing.mode":                         "forward",
		"routing.heartbeatInterval":            "500ms",
		"routing.nodeTimeout":                  "2s",
		"lease.duration":                       "3s",
		"lease.renewInterval":                  "1s",
		"lease.clockSkew":                      "500ms",
		"database.tx.idleInTransactionTimeout": "3s",
		"resubmit.interval":                    "5s",
		"pipeline.adoptInterval":               "500ms",
		"stuck.minAge":                         "2m",
	}
}

// cluster is the service processes of a run, each reaching PostgreSQL through its own
// link proxy (so one node's link can be slowed) with its node id as application_name (so
// one node's connections can be cut).
type cluster struct {
	bin      string
	dir      string
	dsn      string // the run's database, direct
	adminDSN string
	mu       sync.Mutex
	nodes    []*node
}

type node struct {
	name string
	// cfg leaves the ports at 0: every life of the node binds what the kernel gives, so a
	// restart may come back on other ports (the registry heartbeat carries them to peers)
	// but always with the same node id.
	cfg  e2e.ServiceConfig
	link *linkProxy
	// rpcs are the node's ways to its chains, one per chain in the order of
	// clusterOptions.chains: each can hold the node's broadcasts on that chain.
	rpcs []*rpcProxy
	// Guarded by cluster.mu.
	svc     *e2e.Service // nil while killed
	httpURL string       // where its latest life serves HTTP
	paused  bool
}

type clusterOptions struct {
	bin      string
	dir      string
	dsn      string // the run's database, direct
	adminDSN string
	// chains are the chains the nodes serve: one is configured in the single-chain form
	// (chain.rpcUrl; its ID is not needed), several as chains: with their ids.
	chains  []e2e.ChainTarget
	signers []*ecdsa.PrivateKey
	count   int
	extra   map[string]any
	// direct connects the nodes to dsn as it is, with no link proxy: a multi-host DSN that
	// follows a failover, whose faults are the database's own.
	direct bool
}

func startCluster(ctx context.Context, o clusterOptions) (*cluster, error) {
	if len(o.chains) == 0 {
		return nil, fmt.Errorf("cluster: no chain to serve")
	}
	c := &cluster{bin: o.bin, dir: o.dir, dsn: o.dsn, adminDSN: o.adminDSN}
	dbURL, err := url.Parse(o.dsn)
	if err != nil {
		return nil, fmt.Errorf("database dsn: %w", err)
	}
	// Read only by RenderConfig, so the nodes can share it.
	overrides := clusterTiming()
	maps.Copy(overrides, o.extra)
	for i := range o.count {
		n, err := newNode(fmt.Sprintf("node-%d", i), *dbURL, o.chains, e2e.ServiceConfig{Signers: o.signers, Overrides: overrides}, o.direct)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.nodes = append(c.nodes, n)
		if err := os.MkdirAll(c.nodeDir(n), 0o755); err != nil {
			c.stop()
			return nil, err
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, len(c.nodes))
	for i, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.start(ctx, n) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// newNode prepares a node's proxies: its database link unless direct (with its name as
// application_name, so its sessions can be cut) and one link per chain. base carries what
// all nodes share.
func newNode(name string, db url.URL, chains []e2e.ChainTarget, base e2e.ServiceConfig, direct bool) (*node, error) {
	n := &node{name: name}
	if !direct {
		var err error
		if n.link, err = newLinkProxy(db.Host); err != nil {
			return nil, err
		}
		db.Host = n.link.addr()
	}
	proxied := make([]e2e.ChainTarget, len(chains))
	for i, target := range chains {
		rpc, err := newRPCProxy(target.RPCURL)
		if err != nil {
			n.closeLinks()
			return nil, err
		}
		n.rpcs = append(n.rpcs, rpc)
		proxied[i] = e2e.ChainTarget{ID: target.ID, RPCURL: rpc.url()}
	}
	if len(proxied) == 1 {
		base.ChainRPCURL = proxied[0].RPCURL
	} else {
		base.Chains = proxied
	}
	q := db.Query()
	q.Set("application_name", name)
	db.RawQuery = q.Encode()
	base.NodeID, base.DatabaseDSN = name, db.String()
	// resubmit.interval comes from clusterTiming (or the extra overrides): Overrides are
	// applied after the ServiceConfig fields, so they win over FastLoops' value.
	n.cfg = e2e.FastLoops(base)
	return n, nil
}

// holdBroadcasts makes the node's links to every chain hold the answer to each broadcast
// for d (0 ends the holding): the node may be about to broadcast on any of its chains.
func (n *node) holdBroadcasts(d time.Duration) {
	for _, p := range n.rpcs {
		p.holdFor.Store(int64(d))
	}
}

// heldBroadcasts is how many broadcasts the node's chain links have held so far.
func (n *node) heldBroadcasts() int64 {
	var held int64
	for _, p := range n.rpcs {
		held += p.held.Load()
	}
	return held
}

// closeLinks closes the node's database and chain links.
func (n *node) closeLinks() {
	n.link.close()
	for _, p := range n.rpcs {
		p.close()
	}
}

func (c *cluster) nodeDir(n *node) string { return filepath.Join(c.dir, n.name) }

func (c *cluster) start(ctx context.Context, n *node) error {
	svc, err := e2e.StartService(ctx, e2e.ServiceOptions{Bin: c.bin, Config: n.cfg, Dir: c.nodeDir(n), StopTimeout: 15 * time.Second})
	if err != nil {
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	c.mu.Lock()
	n.svc, n.httpURL, n.paused = svc, svc.HTTPURL(), false
	c.mu.Unlock()
	return nil
}

// url is the HTTP base URL of the node's latest life, running or not: a load balancer
// keeps sending to a dead node until its health check notices.
func (c *cluster) url(n *node) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.httpURL
}

// client talks to the node wherever its latest life serves.
func (c *cluster) client(n *node) *e2e.Client {
	return e2e.NewFollowingClient(func() string { return c.url(n) })
}

// clients are one client per node.
func (c *cluster) clients() []*e2e.Client {
	out := make([]*e2e.Client, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = c.client(n)
	}
	return out
}

func (c *cluster) logPaths() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = filepath.Join(c.nodeDir(n), "service.log")
	}
	return out
}

func (c *cluster) running() []*node {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*node
	for _, n := range c.nodes {
		if n.svc != nil && !n.paused {
			out = append(out, n)
		}
	}
	return out
}

func (c *cluster) kill(n *node) {
	c.mu.Lock()
	svc := n.svc
	n.svc = nil
	c.mu.Unlock()
	if svc != nil {
		svc.Kill()
	}
}

func (c *cluster) pause(n *node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.svc == nil {
		return fmt.Errorf("%s is not running", n.name)
	}
	n.paused = true
	return n.svc.Pause()
}

func (c *cluster) resume(n *node) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n.svc == nil {
		return nil
	}
	n.paused = false
	return n.svc.Resume()
}

// leaseHolders names the nodes that hold a live signer lease now.
func (c *cluster) leaseHolders(ctx context.Context) (map[string]bool, error) {
	conn, err := pgx.Connect(ctx, c.dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SELECT DISTINCT split_part(owner_node, '#', 1) FROM signer_lease WHERE expires_at > now()")
	if err != nil {
		return nil, err
	}
	holders := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, err
		}
		holders[name] = true
	}
	return holders, rows.Err()
}

// cutDatabase terminates every session the node has open (its application_name).
func (c *cluster) cutDatabase(ctx context.Context, n *node) (int, error) {
	conn, err := pgx.Connect(ctx, c.adminDSN)
	if err != nil {
		return 0, err
	}
	defer conn.Close(ctx)
	var cut int
	err = conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1", n.name).Scan(&cut)
	return cut, err
}

// heal brings every node back: resumed, restarted, links fast again.
func (c *cluster) heal(ctx context.Context) error {
	for _, n := range c.nodes {
		n.link.setDelay(0)
		if err := c.resume(n); err != nil {
			return err
		}
		c.mu.Lock()
		dead := n.svc == nil
		c.mu.Unlock()
		if dead {
			if err := c.start(ctx, n); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.link.setDelay(0)
		// No resume first: Stop sends SIGCONT after SIGTERM, so a paused node stops too.
		c.mu.Lock()
		svc := n.svc
		n.svc = nil
		c.mu.Unlock()
		if svc != nil {
			_ = svc.Stop()
		}
		n.closeLinks()
	}
}
