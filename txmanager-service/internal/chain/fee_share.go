package chain

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// sharedFees gives every signer of a chain one fee suggestion for up to maxAge. Each signer's
// submit pass asks for fees; asking the node each time costs it a walk over recent blocks
// (eth_feeHistory, eth_maxPriorityFeePerGas) and the latest block's transaction list, for an
// answer that only changes once per block. Callers that ask while a fetch runs wait for it
// instead of starting their own. Failures are not kept: the next caller asks again.
type sharedFees struct {
	maxAge time.Duration
	now    func() time.Time

	mu        sync.Mutex
	fees      services.FeeSuggestion
	fetchedAt time.Time
	have      bool
	running   *feeFlight // nil when no fetch runs
}

// feeFlight is one fetch; done is closed when fees and err are set.
type feeFlight struct {
	done chan struct{}
	fees services.FeeSuggestion
	err  error
}

func newSharedFees(maxAge time.Duration) *sharedFees {
	return &sharedFees{maxAge: maxAge, now: time.Now}
}

// get returns a suggestion no older than maxAge, fetching one with fetch when there is none.
// The fetch does not run on the caller's context: a caller with little time left would end
// it for every signer waiting on it. Each caller stops waiting when its own context ends;
// fetch is bounded by the chain's own call timeouts.
func (s *sharedFees) get(ctx context.Context, fetch func(context.Context) (services.FeeSuggestion, error)) (services.FeeSuggestion, error) {
	if s.maxAge <= 0 {
		return fetch(ctx)
	}
	s.mu.Lock()
	if s.have && s.now().Sub(s.fetchedAt) < s.maxAge {
		fees := s.fees
		s.mu.Unlock()
		return cloneFees(fees), nil
	}
	flight := s.running
	if flight == nil {
		flight = &feeFlight{done: make(chan struct{})}
		s.running = flight
		go s.fly(context.WithoutCancel(ctx), flight, fetch)
	}
	s.mu.Unlock()
	select {
	case <-flight.done:
		if flight.err != nil {
			return services.FeeSuggestion{}, flight.err
		}
		return cloneFees(flight.fees), nil
	case <-ctx.Done():
		return services.FeeSuggestion{}, ctx.Err()
	}
}

// fly runs one fetch and hands its result to everyone waiting on flight; a panic in it (a
// node's answer no decoder expected) becomes the fetch's error, so no caller waits forever.
func (s *sharedFees) fly(ctx context.Context, flight *feeFlight, fetch func(context.Context) (services.FeeSuggestion, error)) {
	defer func() {
		if p := recover(); p != nil {
			flight.fees, flight.err = services.FeeSuggestion{}, fmt.Errorf("fee suggestion: panic: %v", p)
		}
		s.mu.Lock()
		s.running = nil
		if flight.err == nil {
			s.fees, s.fetchedAt, s.have = flight.fees, s.now(), true
		}
		s.mu.Unlock()
		close(flight.done)
	}()
	flight.fees, flight.err = fetch(ctx)
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
