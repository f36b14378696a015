package conf

import (
	"fmt"
	"net/netip"
	"time"
)

// Webhooks pace the delivery of pushed events to subscriptions (docs/webhooks.md).
type Webhooks struct {
	// Enabled: this node delivers webhooks (the admin API serves subscriptions regardless).
	Enabled bool `json:"enabled"`
	// Lease: how long a node holds a subscription between renewals; another node takes it
	// over when it lapses.
	Lease Duration `json:"lease"`
	// PassInterval: how often a node renews its subscriptions and takes free ones.
	PassInterval Duration `json:"passInterval"`
	// Timeout bounds one delivery (connection, request and answer).
	Timeout Duration `json:"timeout"`
	// BackoffMin is the first wait before a failed delivery is tried again; each failure
	// doubles it, with full jitter.
	BackoffMin Duration `json:"backoffMin"`
	// BackoffMax bounds the wait between retries of a failed delivery.
	BackoffMax Duration `json:"backoffMax"`
	// DeadAfter: a subscription whose deliveries have failed this long is dead until an
	// operator resumes it.
	DeadAfter Duration `json:"deadAfter"`
	// ClaimsPerPass: how many free subscriptions a node takes a pass, so nodes share them.
	ClaimsPerPass int `json:"claimsPerPass"`
	// AllowNetworks are CIDR ranges webhooks may reach although the network policy refuses
	// them (loopback, link-local, private, shared). In development loopback and the private
	// ranges are allowed anyway.
	AllowNetworks []string `json:"allowNetworks"`
	// AllowHTTP lets plain http URLs through (always in development).
	AllowHTTP bool `json:"allowHTTP"`
}

// check checks the section, and retention's horizon against it (horizon).
func (w Webhooks) check(p *problems, horizon Duration) {
	p.positive(w.Lease, "webhooks.lease")
	p.positive(w.PassInterval, "webhooks.passInterval")
	p.require(w.PassInterval < w.Lease, "webhooks.passInterval", "must be shorter than webhooks.lease, or leases lapse between renewals")
	p.positive(w.Timeout, "webhooks.timeout")
	p.positive(w.BackoffMin, "webhooks.backoffMin")
	p.require(w.BackoffMax >= w.BackoffMin, "webhooks.backoffMax", "must be at least webhooks.backoffMin")
	p.positive(w.DeadAfter, "webhooks.deadAfter")
	// Service events carry no mark of what retention deleted, so a subscription whose
	// receiver is down would skip those deleted while it was still trying: it must be dead
	// (and its cursor refused on resumption) before retention reaches its events. An hour
	// on top covers the failures' records, written at most once a second, and the backoff.
	p.require(!w.Enabled || horizon == 0 || horizon.Std() >= w.DeadAfter.Std()+time.Hour, "retention.horizon",
		"must be 0 (keep everything) or at least an hour above webhooks.deadAfter (%s) where this node delivers webhooks: events retention deleted would be skipped, without a word, by a subscription still trying to deliver them",
		w.DeadAfter.Std())
	p.require(w.ClaimsPerPass > 0, "webhooks.claimsPerPass", "must be positive")
	for i, n := range w.AllowNetworks {
		_, err := netip.ParsePrefix(n)
		p.require(err == nil, fmt.Sprintf("webhooks.allowNetworks[%d]", i), "%q is not a CIDR range such as 10.20.0.0/16", n)
	}
}

// AllowedPrefixes are AllowNetworks parsed (check has refused any that does not parse), with
// loopback and the private ranges in development.
func (w Webhooks) AllowedPrefixes(environment string) []netip.Prefix {
	var out []netip.Prefix
	for _, n := range w.AllowNetworks {
		if prefix, err := netip.ParsePrefix(n); err == nil {
			out = append(out, prefix)
		}
	}
	if environment == EnvironmentDevelopment {
		for _, n := range []string{"127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7"} {
			out = append(out, netip.MustParsePrefix(n))
		}
	}
	return out
}
