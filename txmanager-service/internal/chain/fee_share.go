package chain

import (
	"context"
	"fmt"
	"math/big"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

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
	flight singleflight.Group

	mu        sync.Mutex
	fees      services.FeeSuggestion
	fetchedAt time.Time
	have      bool
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
	fees, fresh := s.fees, s.have && s.now().Sub(s.fetchedAt) < s.maxAge
	s.mu.Unlock()
	if fresh {
		return cloneFees(fees), nil
	}
	detached := context.WithoutCancel(ctx)
	answer := s.flight.DoChan("fees", func() (any, error) { return s.fetchAndKeep(detached, fetch) })
	select {
	case r := <-answer:
		if r.Err != nil {
			return services.FeeSuggestion{}, r.Err
		}
		return cloneFees(r.Val.(services.FeeSuggestion)), nil
	case <-ctx.Done():
		return services.FeeSuggestion{}, ctx.Err()
	}
}

// fetchAndKeep runs one fetch and keeps a suggestion it gets. A panic in it (a node's answer
// no decoder expected) becomes its error: singleflight would crash the process with it.
func (s *sharedFees) fetchAndKeep(ctx context.Context, fetch func(context.Context) (services.FeeSuggestion, error)) (fees services.FeeSuggestion, err error) {
	defer func() {
		if p := recover(); p != nil {
			fees, err = services.FeeSuggestion{}, fmt.Errorf("fee suggestion: panic: %v", p)
		}
	}()
	if fees, err = fetch(ctx); err == nil {
		s.mu.Lock()
		s.fees, s.fetchedAt, s.have = fees, s.now(), true
		s.mu.Unlock()
	}
	return fees, err
}

// cloneFees copies a suggestion so a caller that changes its numbers changes no one else's.
func cloneFees(f services.FeeSuggestion) services.FeeSuggestion {
	return services.FeeSuggestion{BaseFee: cloneBig(f.BaseFee), TipCap: cloneBig(f.TipCap), Legacy: f.Legacy, GasPrice: cloneBig(f.GasPrice), BlockGasLimit: f.BlockGasLimit}
}

func cloneBig(v *big.Int) *big.Int {
	if v == nil {
		return nil
	}
	return new(big.Int).Set(v)
}
