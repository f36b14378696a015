package domain

import (
	"context"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// Principal is who is calling, as authentication established it, and what they may do.
type Principal struct {
	// ID names the caller in logs and audit (API key id, JWT subject).
	ID string
	// AllSigners grants every managed signer; otherwise only Signers.
	AllSigners bool
	Signers    map[common.Address]bool
	// Admin grants the admin API (and /metrics).
	Admin bool
	// Metrics grants /metrics alone (a Prometheus scraper's key).
	Metrics bool
	// Roles are what the credential may do besides using its signers: an approval rule
	// names the role its approvers hold.
	Roles map[string]bool
	// ExpiresAt is when the credential stops being valid (a token's expiry; zero for an
	// API key): a stream opened with it ends then.
	ExpiresAt time.Time
}

// CanReadMetrics reports whether the principal may scrape /metrics.
func (p Principal) CanReadMetrics() bool { return p.Admin || p.Metrics }

// CanUse reports whether the principal may act for signer.
func (p Principal) CanUse(signer common.Address) bool { return p.AllSigners || p.Signers[signer] }

// SignerFilter lists the signers the principal may see (nil when it may see all).
func (p Principal) SignerFilter() []string {
	if p.AllSigners {
		return nil
	}
	out := make([]string, 0, len(p.Signers))
	for a := range p.Signers {
		out = append(out, a.Hex())
	}
	return out
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal in ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
