package chain

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// sharedFees gives every signer of a chain one fee suggestion for up to maxAge. Each signer's
// submit pass asks for fees; asking the node each time costs it a walk over recent blocks
// (eth_feeHistory, eth_maxPriorityFeePerGas) and the latest block's transaction list, for an
// answer that only changes once per block. Callers that ask while a fetch is running wait for
// it instead of starting their own. Failures are not kept: the next caller asks again.
type sharedFees struct {
	maxAge time.Duration
	now    func() time.Time

	mu        sync.Mutex
	fees      services.FeeSuggestion
	fetchedAt time.Time
	have      bool
	// inflight is closed when the running fetch ends; nil when none runs.
	inflight chan struct{}
	// lastErr is the running fetch's failure, read by its waiters after inflight closes.
	lastErr error
}

func newSharedFees(maxAge time.Duration) *sharedFees {
	return &sharedFees{maxAge: maxAge, now: time.Now}
}

// get returns a suggestion no older than maxAge, fetching one with fetch when there is none.
func (s *sharedFees) get(ctx context.Context, fetch func(context.Context) (services.FeeSuggestion, error)) (services.FeeSuggestion, error) {
	if s.maxAge <= 0 {
		return fetch(ctx)
	}
	for {
		s.mu.Lock()
		if s.have && s.now().Sub(s.fetchedAt) < s.maxAge {
			fees := s.fees
			s.mu.Unlock()
			return cloneFees(fees), nil
		}
		if wait := s.inflight; wait != nil {
			s.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return services.FeeSuggestion{}, ctx.Err()
			}
			s.mu.Lock()
			err := s.lastErr
			s.mu.Unlock()
			// The fetch we waited for failed for its caller's own reason (its deadline or
			// cancellation): that says nothing about the node, so ask again ourselves.
			if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
				return services.FeeSuggestion{}, err
			}
			continue
		}
		done := make(chan struct{})
		s.inflight = done
		s.mu.Unlock()

		fees, err := fetch(ctx)
		s.mu.Lock()
		s.inflight, s.lastErr = nil, err
		if err == nil {
			s.fees, s.fetchedAt, s.have = fees, s.now(), true
		}
		s.mu.Unlock()
		close(done)
		if err != nil {
			return services.FeeSuggestion{}, err
		}
		return cloneFees(fees), nil
	}
}

// cloneFees copies a suggestion so a caller that changes its numbers changes no one else's.
func cloneFees(f services.FeeSuggestion) services.FeeSuggestion {
	return services.FeeSuggestion{BaseFee: cloneBig(f.BaseFee), TipCap: cloneBig(f.TipCap), Legacy: f.Legacy, GasPrice: cloneBig(f.GasPrice)}
}

func cloneBig(v *big.Int) *big.Int {
	if v == nil {
		return nil
	}
	return new(big.Int).Set(v)
}
