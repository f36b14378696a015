package signer

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Source is one place keys live. It signs only for the addresses it lists and answers
// any other address with an error matching domain.ErrUnknownSigner.
type Source interface {
	// Addresses lists the signers the source holds keys for.
	Addresses() []common.Address
	// SignTx returns tx signed by from for chainID.
	SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error)
}

// Registry is the set of signers this service manages, each owned by exactly one source.
// It implements services.TxSigner and services.SignerDirectory and is safe for concurrent
// use. Signers are added and retired at run time (the signer roster): readers see one
// immutable view at a time, swapped whole on each change, so signing never waits for a
// change being made.
type Registry struct {
	view atomic.Pointer[registryView]

	// mu serialises changes; releases are the cleanups of sources added at run time.
	mu       sync.Mutex
	releases map[common.Address]func()
}

type registryView struct {
	// owners maps each managed signer to its source; a nil source means the address is
	// managed but no key is held (NewRegistry).
	owners map[common.Address]Source
	addrs  []common.Address // sorted
	// refusing: retiring or retired signers, which take no new transaction. A retiring
	// one is still in owners (its unfinished transactions are signed); a retired one is not.
	refusing map[common.Address]domain.RosterState
	// paused: signers an operator paused, which take no new transaction until resumed.
	paused map[common.Address]bool
}

func newRegistry(owners map[common.Address]Source) *Registry {
	r := &Registry{releases: map[common.Address]func(){}}
	r.view.Store(newView(owners, nil))
	return r
}

func newView(owners map[common.Address]Source, refusing map[common.Address]domain.RosterState) *registryView {
	v := &registryView{owners: owners, refusing: refusing, addrs: slices.Collect(maps.Keys(owners))}
	if v.refusing == nil {
		v.refusing = map[common.Address]domain.RosterState{}
	}
	slices.SortFunc(v.addrs, common.Address.Cmp)
	return v
}

// NewRegistryFromSources joins sources. Two sources claiming the same address is an
// error: which key signs must never depend on map order.
func NewRegistryFromSources(sources ...Source) (*Registry, error) {
	owners := make(map[common.Address]Source)
	for i, src := range sources {
		if src == nil {
			return nil, fmt.Errorf("signer source %d is nil", i)
		}
		for _, addr := range src.Addresses() {
			if _, dup := owners[addr]; dup {
				return nil, fmt.Errorf("signer %s is held by more than one key source", addr.Hex())
			}
			owners[addr] = src
		}
	}
	return newRegistry(owners), nil
}

// NewRegistry manages addrs without holding their keys: Manages answers true and SignTx
// fails with domain.ErrUnknownSigner. It keeps callers that only need the directory
// working; use NewFromConfig to sign.
func NewRegistry(addrs []common.Address) *Registry {
	owners := make(map[common.Address]Source, len(addrs))
	for _, addr := range addrs {
		owners[addr] = nil
	}
	return newRegistry(owners)
}

// Manages reports whether the registry holds addr (in any roster state but retired).
func (r *Registry) Manages(addr common.Address) bool {
	_, ok := r.view.Load().owners[addr]
	return ok
}

// Accepts implements services.SignerDirectory: nil when addr may be given a new
// transaction, an error matching domain.ErrSignerRetired when it is retiring or retired,
// and one matching domain.ErrUnknownSigner when no key is held for it.
func (r *Registry) Accepts(addr common.Address) error {
	v := r.view.Load()
	if state, refused := v.refusing[addr]; refused {
		return fmt.Errorf("%w: %s is %s", domain.ErrSignerRetired, addr.Hex(), state)
	}
	if _, ok := v.owners[addr]; !ok {
		return fmt.Errorf("%w: %s", domain.ErrUnknownSigner, addr.Hex())
	}
	if v.paused[addr] {
		return fmt.Errorf("%w: %s", domain.ErrSignerPaused, addr.Hex())
	}
	return nil
}

// Addresses lists the managed signers, sorted.
func (r *Registry) Addresses() []common.Address { return slices.Clone(r.view.Load().addrs) }

// SignTx implements services.TxSigner by handing tx to the source that holds from.
func (r *Registry) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	src := r.view.Load().owners[from]
	if src == nil {
		return nil, fmt.Errorf("sign for %s: no key source holds it: %w", from.Hex(), domain.ErrUnknownSigner)
	}
	return src.SignTx(ctx, from, tx, chainID)
}

// Add puts the signer of src, a source built for one signer at run time, into service in
// its roster state (retiring refuses creates) and paused or not, in one step: no create is
// served in the moment between the key's arrival and its state's. release, when not nil,
// is run when the signer is retired (it wipes the decrypted key, closes the connection). A
// signer already held is an error: two keys must never answer for one address, and so is
// a retired one: its key must not be held.
func (r *Registry) Add(src Source, release func(), state domain.RosterState, paused bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	addrs := src.Addresses()
	if len(addrs) != 1 {
		return fmt.Errorf("a key source added at run time must hold one signer, not %d", len(addrs))
	}
	addr := addrs[0]
	cur := r.view.Load()
	if _, held := cur.owners[addr]; held {
		return fmt.Errorf("signer %s is already held by a key source", addr.Hex())
	}
	if state == domain.RosterRetired {
		return fmt.Errorf("signer %s is retired: its key is not held", addr.Hex())
	}
	owners, refusing := maps.Clone(cur.owners), maps.Clone(cur.refusing)
	owners[addr] = src
	delete(refusing, addr)
	if state != domain.RosterActive {
		refusing[addr] = state
	}
	if release != nil {
		r.releases[addr] = sync.OnceFunc(release)
	}
	next := newView(owners, refusing)
	next.paused = pausedWith(cur.paused, addr, paused)
	r.view.Store(next)
	return nil
}

// SetState applies a roster state to a held or known signer: active serves creates,
// retiring keeps signing its unfinished transactions but refuses new ones, retired drops
// the key (running its release, for a source added at run time) and refuses creates.
func (r *Registry) SetState(addr common.Address, state domain.RosterState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.view.Load()
	owners, refusing := cur.owners, maps.Clone(cur.refusing)
	switch state {
	case domain.RosterActive:
		delete(refusing, addr)
	case domain.RosterRetired:
		refusing[addr] = state
		if _, held := owners[addr]; held {
			owners = maps.Clone(owners)
			delete(owners, addr)
		}
		if release := r.releases[addr]; release != nil {
			delete(r.releases, addr)
			// After the new view is stored: no signature starts on the source any more.
			defer release()
		}
	default: // retiring, or a state this version does not know: refuse creates
		refusing[addr] = state
	}
	next := newView(owners, refusing)
	next.paused = cur.paused
	r.view.Store(next)
}

// SetPaused applies an operator's pause (or resume) of addr: a paused signer refuses new
// creates with domain.ErrSignerPaused; its key stays in service.
func (r *Registry) SetPaused(addr common.Address, paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	cur := r.view.Load()
	if cur.paused[addr] == paused {
		return
	}
	next := *cur
	next.paused = pausedWith(cur.paused, addr, paused)
	r.view.Store(&next)
}

// pausedWith is the set of paused signers with addr's pause as given: a copy when that
// changes it, since a stored view is read without the lock.
func pausedWith(paused map[common.Address]bool, addr common.Address, on bool) map[common.Address]bool {
	if paused[addr] == on {
		return paused
	}
	next := maps.Clone(paused)
	if next == nil {
		next = map[common.Address]bool{}
	}
	if on {
		next[addr] = true
	} else {
		delete(next, addr)
	}
	return next
}

// State is the roster state the registry applies to addr: active, retiring or retired;
// held reports whether a key for it is in service here.
func (r *Registry) State(addr common.Address) (state domain.RosterState, held bool) {
	v := r.view.Load()
	_, held = v.owners[addr]
	if s, refused := v.refusing[addr]; refused {
		return s, held
	}
	return domain.RosterActive, held
}

// Close runs the releases of every source added at run time (the sources built at start
// have their own cleanup, NewFromConfig's).
func (r *Registry) Close() {
	r.mu.Lock()
	releases := r.releases
	r.releases = map[common.Address]func(){}
	r.mu.Unlock()
	for _, release := range releases {
		release()
	}
}

// pacedSource is a Source that takes a limited number of signatures at once.
type pacedSource interface {
	MaxInFlight() int
}

// MaxInFlight implements services.SigningPace: the limit of the source holding from, or
// 0 when it has none.
func (r *Registry) MaxInFlight(from common.Address) int {
	if paced, ok := r.view.Load().owners[from].(pacedSource); ok {
		return paced.MaxInFlight()
	}
	return 0
}
