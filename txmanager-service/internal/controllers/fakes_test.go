package controllers_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// feedStore is the completions feed as the sequencer left it: positioned completions and
// how far retention pruned. Positions are assigned by the pipeline's finality stage, which
// these tests do not run; the sequencer's own methods are not used by readers.
type feedStore struct {
	services.CompletionStore
	mu          sync.Mutex
	completions []services.Completion
	pruned      services.FeedPosition
	err         error
}

func (f *feedStore) add(c ...services.Completion) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.completions = append(f.completions, c...)
}

func (f *feedStore) ListAfter(_ context.Context, pos services.FeedPosition, limit int, signers []string, chainID uint64) ([]services.Completion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var out []services.Completion
	for _, c := range f.completions {
		if c.Position <= pos || (chainID != 0 && c.ChainID != chainID) || (signers != nil && !slices.Contains(signers, c.Signer.Hex())) {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, c)
	}
	return out, nil
}

func (f *feedStore) State(context.Context) (services.FeedState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last services.FeedPosition
	for _, c := range f.completions {
		last = max(last, c.Position)
	}
	return services.FeedState{LastPosition: last, PrunedThrough: f.pruned}, nil
}

func (f *feedStore) LegacyPosition(context.Context, uint64, int64) (services.FeedPosition, error) {
	return 0, errors.New("no legacy cursors in this feed")
}

// fakeKeys stands for the signer registry's key sources: which signers hold a key and in
// what roster state.
type fakeKeys struct {
	mu       sync.Mutex
	held     map[common.Address]bool
	states   map[common.Address]domain.RosterState
	buildErr error
}

func newFakeKeys() *fakeKeys {
	return &fakeKeys{held: map[common.Address]bool{}, states: map[common.Address]domain.RosterState{}}
}

func (k *fakeKeys) Check(domain.RosterSigner) error { return nil }

func (k *fakeKeys) Build(_ context.Context, e domain.RosterSigner) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.buildErr != nil {
		return k.buildErr
	}
	k.held[e.Signer] = true
	return nil
}

func (k *fakeKeys) State(signer common.Address) (domain.RosterState, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	s, ok := k.states[signer]
	if !ok {
		s = domain.RosterActive
	}
	return s, k.held[signer]
}

func (k *fakeKeys) Apply(e domain.RosterSigner) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.states[e.Signer] = e.State
	if e.State == domain.RosterRetired {
		delete(k.held, e.Signer)
	}
}

// quarantineStore is the admin repository with one signer's quarantine set by the test:
// a quarantine needs the chain to hold nonces the database lost, which the allocator only
// finds with a chain that ran ahead of it. Everything else reads the real database.
type quarantineStore struct {
	services.AdminStore
	mu        sync.Mutex
	record    services.Quarantine
	ranges    []services.NonceRangeSummary
	recovered map[uint64]services.RecoveredRow
	// releaseCarriedOut: a release request ends the quarantine at once (its recovery had
	// nothing left to record).
	releaseCarriedOut bool
	err               error
}

func (q *quarantineStore) GetQuarantine(_ context.Context, signer string) (services.Quarantine, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.err != nil {
		return services.Quarantine{}, q.err
	}
	if signer != q.record.Signer {
		return services.Quarantine{}, nil
	}
	return q.record, nil
}

func (q *quarantineStore) RequestRelease(_ context.Context, signer, by, note string) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if signer != q.record.Signer || !q.record.Quarantined {
		return false, nil
	}
	now := time.Now()
	q.record.ReleaseRequestedAt, q.record.ReleaseRequestedBy = &now, by
	if q.releaseCarriedOut {
		q.record.Quarantined, q.record.ReleasedAt, q.record.ReleasedBy, q.record.ReleaseNote = false, &now, by, note
	}
	return true, nil
}

func (q *quarantineStore) QuarantineNonceRanges(context.Context, string) ([]services.NonceRangeSummary, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.ranges, nil
}

func (q *quarantineStore) ListRecovered(_ context.Context, _ string, nonces []uint64) (map[uint64]services.RecoveredRow, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := map[uint64]services.RecoveredRow{}
	for _, n := range nonces {
		if row, ok := q.recovered[n]; ok {
			out[n] = row
		}
	}
	return out, nil
}
