package repositories

import (
	"github.com/bionicotaku/txmanager-service/internal/domain"
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
