package server

import (
	"context"
	"encoding/json"
	nethttp "net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// maxHeadAge: readiness fails when the chain head is older than this (a stalled node).
const maxHeadAge = 2 * time.Minute

// Health answers liveness and readiness probes.
type Health struct {
	pool  *pgxpool.Pool
	chain services.Chain
}

// NewHealth builds the probes.
func NewHealth(pool *pgxpool.Pool, chain services.Chain) *Health {
	return &Health{pool: pool, chain: chain}
}

// Live is 200 while the process serves HTTP.
func (h *Health) Live(w nethttp.ResponseWriter, _ *nethttp.Request) {
	writeJSON(w, nethttp.StatusOK, map[string]any{"status": "ok"})
}

// Ready is 200 when the database answers and the chain head is recent.
func (h *Health) Ready(w nethttp.ResponseWriter, r *nethttp.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	ready := true
	if err := h.pool.Ping(ctx); err != nil {
		checks["database"] = "unreachable"
		ready = false
	} else {
		checks["database"] = "ok"
	}
	head, err := h.chain.LatestHeader(ctx)
	switch {
	case err != nil:
		checks["chain"] = "unreachable"
		ready = false
	default:
		age := time.Since(time.Unix(int64(head.Time), 0))
		checks["chain_head_age"] = age.Truncate(time.Second).String()
		if age > maxHeadAge {
			checks["chain"] = "stale head"
			ready = false
		} else {
			checks["chain"] = "ok"
		}
	}
	status := nethttp.StatusOK
	if !ready {
		status = nethttp.StatusServiceUnavailable
	}
	writeJSON(w, status, map[string]any{"ready": ready, "checks": checks})
}

func writeJSON(w nethttp.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
