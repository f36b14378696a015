package app

import (
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

// rosterBuildTimeout bounds building one roster signer's key source (a KMS public key
// look-up with its retries, clef's account list).
const rosterBuildTimeout = 30 * time.Second

// rosterBuildBudget bounds one roster pass's building, all its builds together: under the
// pass's own deadline (a minute, internal/workers), so that the states are applied after it.
const rosterBuildBudget = 40 * time.Second

// NewSignerRoster assembles the signer roster: the keys it builds go into registry, the
// leases it lets go are every served chain's. The cleanup releases the key sources it built.
func NewSignerRoster(bc *conf.Bootstrap, store services.RosterStore, registry *signer.Registry, chains ChainStacks, tx txmanager.Manager, audit *services.AuditTrail, logger log.Logger) (*services.SignerRoster, func()) {
	leases := make([]*services.LeaseManager, len(chains))
	for i, chain := range chains {
		leases[i] = chain.Leases
	}
	var refuse func([]common.Address) error
	if bc.Environment != conf.EnvironmentDevelopment {
		refuse = refusePublicKeys
	}
	keys := signer.NewRosterKeys(registry, bc.Signers, refuse)
	cfg := services.RosterConfig{
		Node: bc.Node.ID, PollInterval: bc.Signers.RosterPollInterval.Std(), BuildTimeout: rosterBuildTimeout, BuildBudget: rosterBuildBudget,
		ConfigSigners: registry.Addresses(),
	}
	return services.NewSignerRoster(cfg, store, keys, leases, tx, audit, logger), keys.Close
}
