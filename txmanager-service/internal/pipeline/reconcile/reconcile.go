// Package reconcile is the pipeline stage that makes the database and the chain agree
// where they disagree about a signer's nonces: a chain ahead of every nonce the database
// knows (the database lost commits: the signer is quarantined), nonces taken by
// transactions without an attempt on record (recognised as ours, or failed when another
// transaction took them for good), and nonce holes (filled with placeholders). Each is
// something a machine can settle; nothing waits for a person unless the configuration says
// so.
package reconcile

import (
	"context"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Config is how the stage reconciles.
type Config struct {
	// AdoptUnknownChainNonces: a key also used outside the service; allocation goes on above
	// nonces the database does not know instead of quarantining the signer.
	AdoptUnknownChainNonces bool
	// ScanBlocks bounds how far back a taken nonce's transaction is looked for.
	ScanBlocks uint64
	// Confirmations make a foreign transaction at a taken nonce final for this stage.
	Confirmations uint64
	// ResubmitInterval: a recognised attempt is broadcast again after this long.
	ResubmitInterval time.Duration
	// FillHoles turns hole filling on; HoleGrace is how long a hole must be seen before it
	// is filled, so a transaction sent outside the service that is still propagating is
	// not raced.
	FillHoles bool
	HoleGrace time.Duration
}

// Store is the stage's view of the database. Every write is fenced on the lease and yields
// *domain.FencedError when the lease no longer matches.
type Store interface {
	// SignerChainCheck returns the signer's next nonce on record (-1: none) and whether it
	// is quarantined.
	SignerChainCheck(ctx context.Context, signer string) (int64, bool, error)
	// Quarantine records a quarantine; false when an operator already released those
	// nonces.
	Quarantine(ctx context.Context, lease domain.Lease, dbNext, chainNext uint64) (bool, error)
	// ListNonceTaken returns the signer's transactions whose nonce went to a transaction
	// without an attempt on record.
	ListNonceTaken(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	// FailNonceTaken makes one of them final as FAILED_FINAL, with its completion.
	FailNonceTaken(ctx context.Context, lease domain.Lease, tx domain.ManagedTx, reason string) error
	// LowestOpenNonce is the signer's lowest nonce not yet final, -1 when none is open.
	LowestOpenNonce(ctx context.Context, signer string) (int64, error)
	// InsertPlaceholders stores placeholder transactions at free nonces and returns how
	// many it created.
	InsertPlaceholders(ctx context.Context, lease domain.Lease, txs []domain.ManagedTx) (int, error)
}

// Reconciler runs the stage for the signers whose lease this node holds.
type Reconciler struct {
	cfg        Config
	store      Store
	attempts   pipeline.AttemptStore
	chain      services.Chain
	leases     *services.LeaseManager
	clock      services.Clock
	metrics    *telemetry.Metrics
	log        *log.Helper
	holes      *holeTracker
	quarantine *quarantineGauge
}

// New builds the stage and registers the quarantine gauge.
func New(cfg Config, store Store, attempts pipeline.AttemptStore, chain services.Chain, leases *services.LeaseManager, clock services.Clock,
	metrics *telemetry.Metrics, logger log.Logger) (*Reconciler, error) {
	r := &Reconciler{cfg: cfg, store: store, attempts: attempts, chain: chain, leases: leases, clock: clock, metrics: metrics,
		log:        log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node())),
		holes:      &holeTracker{seen: map[string]seenHole{}},
		quarantine: &quarantineGauge{signers: map[string]bool{}},
	}
	return r, r.quarantine.register(metrics)
}

// quarantineGauge remembers which held signers the latest checks found quarantined.
type quarantineGauge struct {
	mu      sync.Mutex
	signers map[string]bool
}

func (g *quarantineGauge) set(signer string, quarantined bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.signers[signer] = quarantined
}

func (g *quarantineGauge) register(metrics *telemetry.Metrics) error {
	return metrics.RegisterGauge(telemetry.SignerQuarantined, "1 for a signer this node holds that is quarantined (the chain holds nonces the database does not know).",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for signer, q := range g.signers {
				v := int64(0)
				if q {
					v = 1
				}
				record(v, attribute.String("signer", signer))
			}
		})
}
