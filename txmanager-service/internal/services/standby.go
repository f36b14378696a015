package services

import (
	"context"
	"fmt"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// standbyWaitTimeout bounds how long an answer waits for the standby to confirm what it
// tells of; past it the caller is asked to come again.
const standbyWaitTimeout = 2 * time.Second

// onStandby returns once every commit made before it is on the database's synchronous
// standby (at once where there is none), or with an error after standbyWaitTimeout.
func onStandby(ctx context.Context, b StandbyBarrier) error {
	ctx, cancel := context.WithTimeout(ctx, standbyWaitTimeout)
	defer cancel()
	return b.AwaitStandby(ctx)
}

// readOnStandby holds a read's answer back until what it read is on the synchronous
// standby. Without it a reader could be shown a transaction, or be handed a feed position,
// that a failover then loses: a completion at that position would later be a different
// transaction's, and a reader past it would never see that one.
func readOnStandby(ctx context.Context, b StandbyBarrier, what string) error {
	if err := onStandby(ctx, b); err != nil {
		return &domain.UnavailableError{Reason: fmt.Sprintf("%s is not known to be on the database's standby yet", what), RetryAfter: time.Second, Err: err}
	}
	return nil
}
