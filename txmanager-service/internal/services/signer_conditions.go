package services

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// SignerCondition is what stops, or may soon stop, a signer from serving, as the database
// records it: every node reads the same.
type SignerCondition struct {
	Signer string
	// Quarantined: the chain holds nonces the database lost; UnrecordedNonces of them have
	// no transaction recorded yet, and ReleaseRequested says an operator released it.
	Quarantined      bool
	UnrecordedNonces uint64
	ReleaseRequested bool
	// SigningFailingSince is when its key source started failing (nil: it signs), with
	// the key source's last error.
	SigningFailingSince *time.Time
	SigningError        string
	// Unsigned transactions wait for their first signature; the oldest for
	// OldestUnsignedAgeSeconds.
	Unsigned                 int
	OldestUnsignedAgeSeconds float64
}

// CanServe: nothing holds the signer's creates back now.
func (c SignerCondition) CanServe() bool { return !c.Quarantined && c.SigningFailingSince == nil }

// Recovering: quarantined, and its recovery will let it serve again without a person (in
// adopt-by-intent mode, or once an operator released it).
func (c SignerCondition) Recovering(recoverByIntent bool) bool {
	return c.Quarantined && (recoverByIntent || c.ReleaseRequested)
}

// SignerConditionStore reads every serving signer's condition on the chain.
type SignerConditionStore interface {
	SignerConditions(ctx context.Context) ([]SignerCondition, error)
}

// SignerConditionsConfig says how recovery releases a quarantined signer.
type SignerConditionsConfig struct {
	RecoverByIntent bool
}

// SignerConditions reports every signer's condition from the database: the per-signer
// gauges (one scrape of any node shows the whole roster, whoever holds which lease) and the
// readiness detail.
type SignerConditions struct {
	cfg   SignerConditionsConfig
	store SignerConditionStore

	mu     sync.Mutex
	cached []SignerCondition
	at     time.Time
}

// signerConditionsMaxAge: one read serves every gauge of a scrape and the readiness probes
// around it.
const signerConditionsMaxAge = time.Second

// NewSignerConditions builds the reader and registers its gauges.
func NewSignerConditions(cfg SignerConditionsConfig, store SignerConditionStore, metrics *telemetry.Metrics) (*SignerConditions, error) {
	c := &SignerConditions{cfg: cfg, store: store}
	gauges := []struct {
		name, help string
		value      func(SignerCondition) float64
	}{
		{telemetry.SignerQuarantined, "1 for a signer that is quarantined (the chain holds nonces the database does not know); every node reports every signer.",
			func(s SignerCondition) float64 { return boolValue(s.Quarantined) }},
		{telemetry.SignerRecovering, "1 for a quarantined signer whose recovery releases it without a person (adopt-by-intent, or an operator released it).",
			func(s SignerCondition) float64 { return boolValue(s.Recovering(cfg.RecoverByIntent)) }},
		{telemetry.SignerRecoveryUnrecorded, "A quarantined signer's unknown nonces its recovery has not recorded a transaction for yet.",
			func(s SignerCondition) float64 { return float64(s.UnrecordedNonces) }},
		{telemetry.SignerSigningFailing, "1 for a signer whose key source fails to sign (its transactions wait; past pipeline.signingStall its creates are refused).",
			func(s SignerCondition) float64 { return boolValue(s.SigningFailingSince != nil) }},
		{telemetry.SignerUnsignedBacklog, "A signer's transactions waiting for their first signature.",
			func(s SignerCondition) float64 { return float64(s.Unsigned) }},
		{telemetry.SignerUnsignedOldestAge, "Age of a signer's oldest transaction waiting for its first signature, in seconds.",
			func(s SignerCondition) float64 { return s.OldestUnsignedAgeSeconds }},
	}
	for _, g := range gauges {
		err := metrics.RegisterFloatGauge(g.name, g.help, func(ctx context.Context, record func(float64, ...attribute.KeyValue)) {
			conditions, err := c.List(ctx)
			if err != nil {
				return // a scrape must not fail because the database is slow
			}
			for _, s := range conditions {
				record(g.value(s), attribute.String("signer", s.Signer))
			}
		})
		if err != nil {
			return nil, fmt.Errorf("register %s: %w", g.name, err)
		}
	}
	return c, nil
}

// List returns every serving signer's condition, read at most signerConditionsMaxAge ago.
func (c *SignerConditions) List(ctx context.Context) ([]SignerCondition, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cached != nil && time.Since(c.at) < signerConditionsMaxAge {
		return c.cached, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conditions, err := c.store.SignerConditions(ctx)
	if err != nil {
		return nil, err
	}
	c.cached, c.at = conditions, time.Now()
	return conditions, nil
}

// Summary says, for the readiness detail, how many signers cannot serve and why; "" when
// every one can.
func (c *SignerConditions) Summary(ctx context.Context) (string, error) {
	conditions, err := c.List(ctx)
	if err != nil {
		return "", err
	}
	quarantined, signing := 0, 0
	for _, s := range conditions {
		switch {
		case s.Quarantined:
			quarantined++
		case s.SigningFailingSince != nil:
			signing++
		}
	}
	if quarantined+signing == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d of %d signers cannot serve: %d quarantined, %d with a key source that fails to sign", quarantined+signing, len(conditions), quarantined, signing), nil
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
