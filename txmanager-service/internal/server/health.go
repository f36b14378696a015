package server

import (
	"context"
	"encoding/json"
	"fmt"
	nethttp "net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

const (
	// maxHeadAge: readiness fails when the chain head is older than this (a stalled node).
	maxHeadAge = 2 * time.Minute
	// probeTimeout bounds one readiness probe of the database and the chain together.
	probeTimeout = 2 * time.Second
)

// Health answers liveness and readiness probes. Readiness answers from the latest probe of
// the database and the chain while it is younger than server.readinessInterval, so
// however often /readyz is hit (it is unauthenticated), the service pings the database and
// asks the chain at most once per interval.
type Health struct {
	pool        *pgxpool.Pool
	replication DatabaseReplication
	chains      []ReadinessChain
	metrics     *telemetry.Metrics
	interval    time.Duration
	now         func() time.Time

	// probing is held while one request probes; the others wait for its answer.
	probing sync.Mutex
	mu      sync.Mutex
	latest  readiness
}

// readiness is one probe's outcome.
type readiness struct {
	at    time.Time
	ready bool
	// degraded: ready, but some signer cannot serve (checks say which kind).
	degraded bool
	checks   map[string]string
}

// ReadinessChain is a served chain readiness probes: every one must answer with a recent head.
type ReadinessChain struct {
	ID    uint64
	Chain services.HeadSource
	// Signers reports the chain's signers that cannot serve, as a detail.
	Signers *services.SignerConditions
}

// DatabaseReplication says what the database server's replication settings risk in a
// failover (the database server watch reads them at start and at every change of server).
type DatabaseReplication interface {
	ReplicationSummary() string
}

// NewHealth builds the probes.
func NewHealth(c conf.Server, pool *pgxpool.Pool, replication DatabaseReplication, chains []ReadinessChain, metrics *telemetry.Metrics) *Health {
	return &Health{pool: pool, replication: replication, chains: chains, metrics: metrics, interval: c.ReadinessInterval.Std(), now: time.Now}
}

// Live is 200 while the process serves HTTP.
func (h *Health) Live(w nethttp.ResponseWriter, _ *nethttp.Request) {
	writeJSON(w, nethttp.StatusOK, map[string]any{"status": "ok"})
}

// Ready is 200 when the database answered and the chain head was recent at the latest probe;
// degraded (still 200) when some signer cannot serve.
func (h *Health) Ready(w nethttp.ResponseWriter, _ *nethttp.Request) {
	r := h.current()
	status := nethttp.StatusOK
	if !r.ready {
		status = nethttp.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": r.ready, "degraded": r.degraded, "checks": r.checks, "probedAt": r.at.UTC().Format(time.RFC3339Nano)})
}

// current returns a probe no older than the interval, probing when there is none.
func (h *Health) current() readiness {
	if r, ok := h.fresh(); ok {
		return r
	}
	h.probing.Lock()
	defer h.probing.Unlock()
	// Another request may have probed while this one waited.
	if r, ok := h.fresh(); ok {
		return r
	}
	// Not the request's context: the answer serves every request waiting on it.
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	r := h.probe(ctx)
	h.mu.Lock()
	h.latest = r
	h.mu.Unlock()
	return r
}

func (h *Health) fresh() (readiness, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.latest, !h.latest.at.IsZero() && h.now().Sub(h.latest.at) < h.interval
}

func (h *Health) probe(ctx context.Context) readiness {
	r := readiness{ready: true, checks: map[string]string{}}
	if err := h.pool.Ping(ctx); err != nil {
		r.checks["database"], r.ready = "unreachable", false
	} else {
		r.checks["database"] = "ok"
	}
	// A detail, not a condition: an asynchronous standby is the operator's choice, and
	// readiness must not flap with it.
	r.checks["database_replication"] = h.replication.ReplicationSummary()
	// Chains are probed side by side: a hung endpoint of one costs the others nothing.
	heads := make([]headProbe, len(h.chains))
	var wg sync.WaitGroup
	for i, c := range h.chains {
		wg.Go(func() {
			head, err := c.Chain.LatestHeader(ctx)
			heads[i] = headProbe{err: err}
			if err == nil {
				heads[i].time = head.Time
			}
		})
	}
	wg.Wait()
	// With several chains a node stays ready while any chain serves: taking it out of the
	// load balancer for one chain's outage would stop every other chain with it. Each chain
	// still reports its own check.
	serving := 0
	for i, c := range h.chains {
		suffix := ""
		if len(h.chains) > 1 {
			suffix = fmt.Sprintf("_%d", c.ID)
		}
		if heads[i].err != nil {
			r.checks["chain"+suffix] = "unreachable"
			continue
		}
		age := h.now().Sub(time.Unix(int64(heads[i].time), 0))
		r.checks["chain_head_age"+suffix] = age.Truncate(time.Second).String()
		if age > maxHeadAge {
			r.checks["chain"+suffix] = "stale head"
			continue
		}
		r.checks["chain"+suffix] = "ok"
		serving++
	}
	if serving == 0 {
		r.ready = false
	}
	// Signers that cannot serve (quarantined, a key source that fails) are a detail, never
	// a reason to be unready: every node would answer for them alike, so taking this one out
	// of a load balancer would only stop the signers that serve. Their own creates answer
	// with the reason, and the signer gauges and alerts name them.
	for _, c := range h.chains {
		if c.Signers == nil {
			continue
		}
		suffix := ""
		if len(h.chains) > 1 {
			suffix = fmt.Sprintf("_%d", c.ID)
		}
		summary, err := c.Signers.Summary(ctx)
		switch {
		case err != nil:
			r.checks["signers"+suffix] = "unknown (database)"
		case summary != "":
			r.checks["signers"+suffix], r.degraded = summary, true
		default:
			r.checks["signers"+suffix] = "ok"
		}
	}
	r.at = h.now()
	outcome := "ready"
	if !r.ready {
		outcome = "not_ready"
	}
	h.metrics.ReadinessProbe(ctx, outcome)
	return r
}

// headProbe is one chain's answer to a readiness probe.
type headProbe struct {
	time uint64
	err  error
}

func writeJSON(w nethttp.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// grpcHealth answers gRPC health checks (grpc.health.v1) from the probe /readyz answers
// from, so a gRPC load balancer or a Kubernetes gRPC probe takes a node out when /readyz
// would, and while it stops. The empty name is the server; the API's services answer alike.
type grpcHealth struct {
	healthpb.UnimplementedHealthServer
	health   *Health
	services map[string]bool
	// stopping is closed when the server begins to stop.
	stopping <-chan struct{}
}

func newGRPCHealth(h *Health, stopping <-chan struct{}, services ...string) *grpcHealth {
	g := &grpcHealth{health: h, stopping: stopping, services: map[string]bool{"": true}}
	for _, s := range services {
		g.services[s] = true
	}
	return g
}

func (g *grpcHealth) status() healthpb.HealthCheckResponse_ServingStatus {
	select {
	case <-g.stopping:
		return healthpb.HealthCheckResponse_NOT_SERVING
	default:
	}
	if !g.health.current().ready {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// Check answers from the latest readiness probe (probing when it is older than the interval).
func (g *grpcHealth) Check(_ context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if !g.services[req.GetService()] {
		return nil, grpcstatus.Errorf(codes.NotFound, "unknown service %q", req.GetService())
	}
	return &healthpb.HealthCheckResponse{Status: g.status()}, nil
}

// Watch sends the status, then each change of it, looking once per readiness interval.
func (g *grpcHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		st := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		if g.services[req.GetService()] {
			st = g.status()
		}
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-stream.Context().Done():
			return stream.Context().Err()
		case <-time.After(g.health.interval):
		}
	}
}
