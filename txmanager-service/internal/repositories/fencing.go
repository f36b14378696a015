package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// fencedError is the one place a fenced statement that found the lease no longer ours
// becomes FENCED: every critical write goes through it.
func fencedError(lease domain.Lease, write string) error {
	return &domain.FencedError{Signer: lease.Signer, Node: lease.Owner, Token: lease.Token, Write: write}
}

// leaseArgs are the three values every fenced statement checks.
func leaseArgs(lease domain.Lease) (signer, node string, token int64) {
	return lease.Signer, lease.Owner, int64(lease.Token)
}

// fencedOutcome turns a fenced statement's (lease_held, updated) into FENCED or a count.
func fencedOutcome(lease domain.Lease, write string, leaseHeld bool, updated int64, err error) (int, error) {
	if err != nil {
		return 0, fmt.Errorf("%s: %w", write, err)
	}
	if !leaseHeld {
		return 0, fencedError(lease, write)
	}
	return int(updated), nil
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// chainScoped is what every repository of one chain holds: the queries on the pool and the
// chain whose rows it reads and writes.
type chainScoped struct {
	q       *sqlcdb.Queries
	chainID int64
}

func newChainScoped(pool *pgxpool.Pool, chain services.ChainID) chainScoped {
	return chainScoped{q: sqlcdb.New(pool), chainID: chain.Int64()}
}

// AppendEvent records a service event on the repository's chain (a statement of its own):
// the pipeline's stores tell webhook subscribers of quarantines, recoveries, signing
// failures and stuck transactions.
func (c chainScoped) AppendEvent(ctx context.Context, e services.ServiceEvent) error {
	e.ChainID = uint64(c.chainID)
	return appendEvent(ctx, c.q, e)
}

// inSession is q, or the same queries inside sess when there is one.
func inSession(q *sqlcdb.Queries, sess txmanager.Session) *sqlcdb.Queries {
	if sess == nil {
		return q
	}
	return sqlcdb.New(sess.DB())
}
