package repositories

import (
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// fencedResult is the one place where "the fenced statement touched nothing" becomes
// FENCED: every critical write goes through it.
func fencedResult(lease domain.Lease, write string, rows int64, err error) error {
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && rows == 0) {
		return &domain.FencedError{Signer: lease.Signer, Node: lease.Owner, Token: lease.Token, Write: write}
	}
	return err
}

// leaseArgs are the three values every fenced statement checks.
func leaseArgs(lease domain.Lease) (signer, node string, token int64) {
	return lease.Signer, lease.Owner, int64(lease.Token)
}
