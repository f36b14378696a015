package services

import (
	"context"
	"errors"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// OpenSigner is a signer with unfinished transactions or a live quarantine, and its lease
// holder, if any.
type OpenSigner struct {
	Signer    string
	Owner     string
	LeaseLive bool
}

// OpenSignerStore reads which signers have unfinished transactions.
type OpenSignerStore interface {
	ListOpenSigners(ctx context.Context) ([]OpenSigner, error)
	// OldestPendingAges is, per signer, the age in seconds of its oldest unfinished tx.
	OldestPendingAges(ctx context.Context, signers []string) (map[string]float64, error)
}

// OpenSigners makes sure every signer with unfinished transactions has some node driving
// its pipeline, and reports how long the oldest of them has waited.
type OpenSigners struct {
	store  OpenSignerStore
	leases *LeaseManager
	keys   SignerDirectory
	log    *log.Helper
}

// NewOpenSigners builds the use case and registers the pending-age gauge.
func NewOpenSigners(store OpenSignerStore, leases *LeaseManager, keys SignerDirectory, metrics *telemetry.Metrics, logger log.Logger) (*OpenSigners, error) {
	o := &OpenSigners{store: store, leases: leases, keys: keys, log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node()))}
	err := metrics.RegisterFloatGauge(telemetry.PendingOldestAgeSeconds,
		"Age of the oldest unfinished transaction, per signer this node holds.",
		func(ctx context.Context, record func(float64, ...attribute.KeyValue)) {
			signers := leases.HeldSigners()
			if len(signers) == 0 {
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			ages, err := store.OldestPendingAges(ctx, signers)
			if err != nil {
				return // a scrape must not fail because the database is slow
			}
			for _, signer := range signers {
				record(ages[signer], attribute.String("signer", signer))
			}
		})
	return o, err
}

// Adopt keeps the leases of signers with unfinished transactions or a live quarantine:
// renewed while this node holds them, and acquired when nobody does (after a restart or a
// peer's departure), so every open transaction and every recovery has some node driving
// it. It returns how many signers it acquired now.
func (o *OpenSigners) Adopt(ctx context.Context) (int, error) {
	open, err := o.store.ListOpenSigners(ctx)
	if err != nil {
		return 0, err
	}
	acquired := 0
	for _, s := range open {
		if _, held := o.leases.Current(s.Signer); held {
			o.leases.Touch(s.Signer)
			continue
		}
		if s.LeaseLive {
			continue // a live peer drives it
		}
		if err := o.keys.Accepts(common.HexToAddress(s.Signer)); errors.Is(err, domain.ErrUnknownSigner) {
			// This node holds no key for it (a key source it could not build, a node
			// configured apart): holding the lease would stall the signer on every node,
			// since nothing it allocated could be signed here. A node that can sign takes it.
			continue
		}
		if _, err := o.leases.Acquire(ctx, s.Signer); err != nil {
			if !errors.Is(err, domain.ErrNotLeader) {
				o.log.Warnw("msg", "could not adopt signer", "signer", s.Signer, "error", err.Error())
			}
			continue
		}
		acquired++
	}
	return acquired, nil
}
