package services

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// RosterStore keeps the signer roster (migration 0012).
type RosterStore interface {
	ListRoster(ctx context.Context) ([]domain.RosterSigner, error)
	// GetRosterSigner answers domain.ErrNotFound for a signer without a row.
	GetRosterSigner(ctx context.Context, signer common.Address) (domain.RosterSigner, error)
	// RegisterConfigSigners adds a row for each signer that has none (source config).
	RegisterConfigSigners(ctx context.Context, node string, signers []common.Address) error
	// AddRosterSigner records entry active; added is false when the signer was already
	// active (nothing changed; the row as it is is returned).
	AddRosterSigner(ctx context.Context, entry domain.RosterSigner, by string) (row domain.RosterSigner, added bool, err error)
	// RetireRosterSigner records the signer retiring; retired is false when it was not
	// active (nothing changed).
	RetireRosterSigner(ctx context.Context, signer common.Address, by, note string) (row domain.RosterSigner, retired bool, err error)
	// CompleteRetirement marks a retiring signer with no unfinished transaction retired;
	// done is false while it still has some.
	CompleteRetirement(ctx context.Context, signer common.Address) (row domain.RosterSigner, done bool, err error)
	// CountUnfinished counts the signer's unfinished transactions on every chain.
	CountUnfinished(ctx context.Context, signer common.Address) (int64, error)
	// PauseRosterSigner records the signer paused inside sess; changed is false when it was
	// paused already. A signer without a row is domain.NotFoundError.
	PauseRosterSigner(ctx context.Context, sess txmanager.Session, signer common.Address, by, note string) (row domain.RosterSigner, changed bool, err error)
	// ResumeRosterSigner clears the pause inside sess; changed is false when it was not paused.
	ResumeRosterSigner(ctx context.Context, sess txmanager.Session, signer common.Address) (row domain.RosterSigner, changed bool, err error)
}

// SignerKeys is the keys side of the roster: building a roster signer's key source and
// setting its state where creates and signing look (the signer registry).
type SignerKeys interface {
	// Check reports whether this node could build entry's key source.
	Check(entry domain.RosterSigner) error
	// Build builds entry's key source and puts its signer into service, in entry's state.
	Build(ctx context.Context, entry domain.RosterSigner) error
	// State is the roster state applied to signer here, and whether its key is held.
	State(signer common.Address) (state domain.RosterState, held bool)
	// Apply sets entry's state: retiring refuses creates, retired drops the key.
	Apply(entry domain.RosterSigner)
}

// RosterConfig tunes the roster.
type RosterConfig struct {
	Node string
	// PollInterval: how often each node reads the roster. At most the lease duration, so a
	// signer added anywhere serves on every node within one lease period.
	PollInterval time.Duration
	// BuildTimeout bounds building one key source (a KMS public key, clef's account list).
	BuildTimeout time.Duration
	// BuildBudget bounds one poll's building, all its builds together (0: two build
	// timeouts), and must leave the poll time to apply the states after it; a poll whose
	// deadline is nearer (it waited for the lock) builds for less. What it leaves unbuilt,
	// or cuts short, is built at the next poll without counting as a failure: the roster's
	// lock, which the admin calls wait for, is held while it builds.
	BuildBudget time.Duration
	// ConfigSigners are the signers of this node's file, registered at start.
	ConfigSigners []common.Address
}

// SignerRoster adds and retires signers at run time, on every node, without a restart. An
// operator's call records the change (AddSigner, RetireSigner); every node reads the roster
// (Sync, every PollInterval) and applies it: a new signer's key source is built and serves at
// once; a retiring signer refuses new creates (the writer's batch reads its state under a
// row lock, so no create is accepted after the retirement is recorded, whatever a node's
// poll has seen), its unfinished transactions go on to a final state as usual, then it is
// recorded retired and every node lets its leases go and drops its key.
type SignerRoster struct {
	cfg    RosterConfig
	store  RosterStore
	keys   SignerKeys
	leases []*LeaseManager
	tx     txmanager.Manager
	audit  *AuditTrail
	log    *log.Helper

	// mu serialises Sync and the admin calls' own applying.
	mu sync.Mutex
	// failed remembers, per signer, the last build error (logged when it changes, not on
	// every poll), how many builds in a row failed, and when the next may be tried.
	failed map[common.Address]buildFailure
}

// buildFailure is a signer whose key source could not be built.
type buildFailure struct {
	err     string
	inARow  int
	nextTry time.Time
}

// Builds that keep failing are tried less often: after buildRetriesAtEachPoll in a row, the
// wait doubles from a poll interval up to maxBuildBackoff. A keystore whose passphrase is
// wrong costs a key derivation (about 256 MiB and a second of CPU) each try, and builds run
// under the roster's lock, which the admin calls wait for.
const (
	buildRetriesAtEachPoll = 3
	maxBuildBackoff        = 5 * time.Minute
)

// NewSignerRoster wires the roster; leases are every served chain's lease managers.
func NewSignerRoster(cfg RosterConfig, store RosterStore, keys SignerKeys, leases []*LeaseManager, tx txmanager.Manager, audit *AuditTrail, logger log.Logger) *SignerRoster {
	if cfg.BuildBudget <= 0 {
		cfg.BuildBudget = 2 * cfg.BuildTimeout
	}
	return &SignerRoster{cfg: cfg, store: store, keys: keys, leases: leases, tx: tx, audit: audit, failed: map[common.Address]buildFailure{},
		log: log.NewHelper(log.With(logger, "component", "signer-roster", "node_id", cfg.Node))}
}

// Interval is the poll interval.
func (r *SignerRoster) Interval() time.Duration { return r.cfg.PollInterval }

// Join registers this node's configured signers (each gets a row its creates lock) and
// applies the roster once, before the node serves: a signer retired while it was down is
// not served for a moment.
func (r *SignerRoster) Join(ctx context.Context) error {
	if len(r.cfg.ConfigSigners) > 0 {
		if err := r.store.RegisterConfigSigners(ctx, r.cfg.Node, r.cfg.ConfigSigners); err != nil {
			return fmt.Errorf("register configured signers in the roster: %w", err)
		}
	}
	return r.Sync(ctx)
}

// Sync reads the roster and applies every signer's state on this node. The key sources to
// build are built side by side first (buildKeys): one at a time, a hundred KMS keys behind
// an outage would hold the node's start, and the admin calls, for a hundred build timeouts.
// The roster is read under the lock the admin calls apply their change under: a change
// recorded after the read is applied after this pass, not overwritten by it.
func (r *SignerRoster) Sync(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	entries, err := r.store.ListRoster(ctx)
	if err != nil {
		return fmt.Errorf("read the signer roster: %w", err)
	}
	r.buildKeys(ctx, slices.DeleteFunc(slices.Clone(entries), func(e domain.RosterSigner) bool { return !r.needsBuild(e) }))
	for _, entry := range entries {
		r.applyState(ctx, entry)
	}
	return nil
}

// apply brings this node in line with entry. Callers hold mu.
func (r *SignerRoster) apply(ctx context.Context, entry domain.RosterSigner) {
	if r.needsBuild(entry) {
		r.buildKeys(ctx, []domain.RosterSigner{entry})
	}
	r.applyState(ctx, entry)
}

// needsBuild: entry's key source is to be built here now. A retiring signer's key is
// needed too: its unfinished transactions are signed by whichever node holds its lease. A
// signer of a node's file is built from that file at start, unless this node can build it
// otherwise (a keystore directory kept for the roster that has its file). Callers hold mu.
func (r *SignerRoster) needsBuild(entry domain.RosterSigner) bool {
	return (entry.State == domain.RosterActive || entry.State == domain.RosterRetiring) && !r.holds(entry.Signer) &&
		(entry.Source != domain.KeySourceConfig || r.keys.Check(entry) == nil) && !time.Now().Before(r.failed[entry.Signer].nextTry)
}

// applyState sets entry's state on this node, whether its key is held or not. Callers hold mu.
func (r *SignerRoster) applyState(ctx context.Context, entry domain.RosterSigner) {
	switch entry.State {
	case domain.RosterActive, domain.RosterRetiring:
		r.keys.Apply(entry)
		if entry.State == domain.RosterRetiring {
			r.completeRetirement(ctx, entry)
		}
	case domain.RosterRetired:
		r.retired(ctx, entry)
	default:
		// A state a newer version wrote: refuse creates rather than guess.
		r.keys.Apply(entry)
	}
}

// concurrentKeyBuilds is how many key sources reached over the network (a KMS, clef) are
// built at once. Keystore files are decrypted one at a time: each decryption is a key
// derivation of about 256 MiB and a second of CPU, which side by side would only add up.
const concurrentKeyBuilds = 8

// maxApplyReserve bounds the part of a poll's or an admin call's deadline kept for applying
// the states after its builds (a quarter of what is left when it starts building, at most
// this): applying is a few short statements.
const maxApplyReserve = 10 * time.Second

// buildBudget is what buildKeys may spend under ctx: the build budget, or less when ctx's
// deadline is nearer. A poll that waited for the roster's lock behind an admin call's build
// starts its builds with less than its whole deadline, and its builds must not use up the
// time the states after them need.
func (r *SignerRoster) buildBudget(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return r.cfg.BuildBudget
	}
	left := time.Until(deadline)
	return min(r.cfg.BuildBudget, left-min(maxApplyReserve, left/4))
}

// buildKeys builds the key sources of entries, each within the build timeout and all
// within the build budget, and records how each went. Callers hold mu.
func (r *SignerRoster) buildKeys(ctx context.Context, entries []domain.RosterSigner) {
	ctx, cancel := context.WithTimeout(ctx, r.buildBudget(ctx))
	defer cancel()
	var (
		wg        sync.WaitGroup
		network   = make(chan struct{}, concurrentKeyBuilds)
		keystores sync.Mutex
		errs      = make([]error, len(entries))
	)
	for i, entry := range entries {
		wg.Go(func() {
			if entry.Source == domain.KeySourceKeystore || entry.Source == domain.KeySourceConfig { // a config signer built here is a keystore file
				keystores.Lock()
				defer keystores.Unlock()
			} else {
				select {
				case network <- struct{}{}:
					defer func() { <-network }()
				case <-ctx.Done():
				}
			}
			if ctx.Err() != nil {
				errs[i] = errBuildNotTried
				return
			}
			buildCtx, cancel := context.WithTimeout(ctx, r.cfg.BuildTimeout)
			defer cancel()
			if errs[i] = r.keys.Build(buildCtx, entry); errs[i] != nil && ctx.Err() != nil {
				errs[i] = errBuildNotTried // cut short by the budget, not given its own timeout
			}
			if errs[i] == nil {
				// Its state (retiring, paused) at once, not after the poll's slowest build.
				// The signer package's Build puts the key in service in that state already;
				// applying it here keeps the rule for every SignerKeys.
				r.keys.Apply(entry)
			}
		})
	}
	wg.Wait()
	for i, entry := range entries {
		r.recordBuild(entry, errs[i])
	}
}

// errBuildNotTried: the poll's build budget ran out before the build could start or end.
var errBuildNotTried = errors.New("not tried: the poll's time for building key sources ran out")

// recordBuild logs how building entry's key source went and, when it failed, when to try
// again. Callers hold mu.
func (r *SignerRoster) recordBuild(entry domain.RosterSigner, err error) {
	if errors.Is(err, errBuildNotTried) {
		return // the next poll builds it
	}
	if err != nil {
		err = &KeySourceError{Err: err}
		f := r.failed[entry.Signer]
		f.inARow++
		if f.inARow >= buildRetriesAtEachPoll {
			f.nextTry = time.Now().Add(min(r.cfg.PollInterval<<min(f.inARow-buildRetriesAtEachPoll+1, 20), maxBuildBackoff))
		}
		if f.err != err.Error() {
			r.log.Errorw("msg", "signer's key source could not be built; trying again, less often while it keeps failing", "signer", entry.Signer.Hex(),
				"source", string(entry.Source), "key_ref", entry.KeyRef, "error", err.Error())
		}
		f.err = err.Error()
		r.failed[entry.Signer] = f
		return
	}
	delete(r.failed, entry.Signer)
	r.log.Infow("msg", "signer in service", "signer", entry.Signer.Hex(), "source", string(entry.Source), "key_ref", entry.KeyRef, "state", string(entry.State))
}

// completeRetirement records the signer retired once none of its transactions is left
// unfinished; every node tries at each poll, the first to see it so records it.
func (r *SignerRoster) completeRetirement(ctx context.Context, entry domain.RosterSigner) {
	row, done, err := r.store.CompleteRetirement(ctx, entry.Signer)
	if err != nil {
		r.log.Warnw("msg", "completing a signer's retirement failed", "signer", entry.Signer.Hex(), "error", err.Error())
		return
	}
	if done {
		r.log.Infow("msg", "signer retired: no unfinished transaction left", "signer", entry.Signer.Hex())
		r.retired(ctx, row)
	}
}

// retired drops the signer's key and lets its leases go on every chain.
func (r *SignerRoster) retired(ctx context.Context, entry domain.RosterSigner) {
	state, held := r.keys.State(entry.Signer)
	if state == domain.RosterRetired && !held && !r.holdsLease(entry.Signer.Hex()) {
		return // applied already
	}
	r.keys.Apply(entry)
	for _, leases := range r.leases {
		if err := leases.LetGo(ctx, entry.Signer.Hex()); err != nil {
			r.log.Warnw("msg", "letting a retired signer's lease go failed", "signer", entry.Signer.Hex(), "error", err.Error())
		}
	}
	r.log.Infow("msg", "retired signer's key dropped and leases let go", "signer", entry.Signer.Hex())
}

func (r *SignerRoster) holdsLease(signer string) bool {
	for _, leases := range r.leases {
		if _, held := leases.Current(signer); held {
			return true
		}
	}
	return false
}

// holds reports whether a key for signer is in service on this node.
func (r *SignerRoster) holds(signer common.Address) bool {
	_, held := r.keys.State(signer)
	return held
}

// RosterEntry is a roster signer with what is left of its work.
type RosterEntry struct {
	domain.RosterSigner
	// Unfinished counts its transactions not yet final, on every chain (retiring signers).
	Unfinished int64
}

// AddSigner puts a signer into service on every node: its key source is built here first
// (a key this node cannot reach is refused before anything is recorded), then recorded;
// this node serves it at once, the others at their next poll. Adding a signer that is
// active with the same key source answers it as it is; with another source is
// domain.ErrSignerActive. A retiring or retired signer is made active again, its nonces
// going on where they stopped.
func (r *SignerRoster) AddSigner(ctx context.Context, signer, source, keyRef, note, by string) (RosterEntry, error) {
	entry, err := domain.ParseRosterAddition(signer, source, keyRef)
	if err != nil {
		return RosterEntry{}, err
	}
	entry.Note = note
	if err := r.keys.Check(entry); err != nil {
		return RosterEntry{}, &domain.ValidationError{Field: "source", Reason: err.Error()}
	}
	existing, err := r.store.GetRosterSigner(ctx, entry.Signer)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return RosterEntry{}, err
	case existing.State == domain.RosterActive && existing.SameKey(entry):
		return RosterEntry{RosterSigner: existing}, nil
	case existing.State == domain.RosterActive:
		return RosterEntry{}, fmt.Errorf("%w: %s", domain.ErrSignerActive, existing)
	case existing.State == domain.RosterRetiring && !existing.SameKey(entry):
		// Its nodes still sign its unfinished transactions with the key they hold: made
		// active with another key source, the row would name one no node builds.
		return RosterEntry{}, fmt.Errorf("%w: %s is retiring with its current key source; add it with another once it is retired", domain.ErrSignerActive, existing)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.holds(entry.Signer) {
		buildCtx, cancel := context.WithTimeout(ctx, r.cfg.BuildTimeout)
		err := r.keys.Build(buildCtx, entry)
		cancel()
		if errors.Is(err, domain.ErrKeySourceUnreachable) {
			return RosterEntry{}, &domain.UnavailableError{Reason: "the key source did not answer; add the signer again in a moment", RetryAfter: 5 * time.Second,
				Err: &KeySourceError{Err: err}}
		}
		if err != nil {
			return RosterEntry{}, &domain.ValidationError{Field: "keyRef", Reason: fmt.Sprintf("the key source could not be read: %v", &KeySourceError{Err: err})}
		}
		delete(r.failed, entry.Signer)
	}
	row, added, err := r.store.AddRosterSigner(ctx, entry, by)
	if err != nil {
		return RosterEntry{}, err
	}
	if !added && !row.SameKey(entry) {
		// Added meanwhile by another operator with another key.
		return RosterEntry{}, fmt.Errorf("%w: %s", domain.ErrSignerActive, row)
	}
	r.keys.Apply(row)
	if added {
		r.log.Infow("msg", "signer added to the roster", "signer", row.Signer.Hex(), "source", string(row.Source), "key_ref", row.KeyRef, "by", by)
		var before any
		if existing.Signer != (common.Address{}) {
			before = rosterAudit(existing)
		}
		r.audit.RecordAfter(ctx, by, domain.AuditSignerAdded, "signer "+row.Signer.Hex(), before, rosterAudit(row))
	}
	return RosterEntry{RosterSigner: row}, nil
}

// RetireSigner records a signer retiring: from the moment it is recorded no create is
// accepted for it on any node; its unfinished transactions go on to a final state, then it
// is retired. Retiring a signer already retiring or retired answers it as it is.
func (r *SignerRoster) RetireSigner(ctx context.Context, signer, note, by string) (RosterEntry, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return RosterEntry{}, err
	}
	existing, err := r.store.GetRosterSigner(ctx, addr)
	switch {
	case errors.Is(err, domain.ErrNotFound):
		if !r.holds(addr) {
			return RosterEntry{}, fmt.Errorf("%w: %s is in no node's roster", domain.ErrUnknownSigner, addr.Hex())
		}
	case err != nil:
		return RosterEntry{}, err
	case existing.State != domain.RosterActive:
		return r.withUnfinished(ctx, existing)
	}
	row, retired, err := r.store.RetireRosterSigner(ctx, addr, by, note)
	if err != nil {
		return RosterEntry{}, err
	}
	if !retired {
		// Retired meanwhile by another call.
		if row, err = r.store.GetRosterSigner(ctx, addr); err != nil {
			return RosterEntry{}, err
		}
		return r.withUnfinished(ctx, row)
	}
	r.log.Infow("msg", "signer retiring: no new transaction is accepted for it", "signer", addr.Hex(), "by", by, "note", note)
	r.audit.RecordAfter(ctx, by, domain.AuditSignerRetired, "signer "+addr.Hex(), rosterAudit(existing), rosterAudit(row))
	r.mu.Lock()
	r.apply(ctx, row)
	r.mu.Unlock()
	if current, err := r.store.GetRosterSigner(ctx, addr); err == nil {
		row = current // retired already, when it had nothing unfinished
	}
	return r.withUnfinished(ctx, row)
}

// List answers the roster with each signer's unfinished transactions.
func (r *SignerRoster) List(ctx context.Context) ([]RosterEntry, error) {
	entries, err := r.store.ListRoster(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]RosterEntry, 0, len(entries))
	for _, e := range entries {
		entry, err := r.withUnfinished(ctx, e)
		if err != nil {
			return nil, err
		}
		out = append(out, entry)
	}
	return out, nil
}

func (r *SignerRoster) withUnfinished(ctx context.Context, row domain.RosterSigner) (RosterEntry, error) {
	if row.State != domain.RosterRetiring {
		return RosterEntry{RosterSigner: row}, nil
	}
	n, err := r.store.CountUnfinished(ctx, row.Signer)
	if err != nil {
		return RosterEntry{}, err
	}
	return RosterEntry{RosterSigner: row, Unfinished: n}, nil
}

// Pause stops new creates for a signer on every node (409 SIGNER_PAUSED) while its
// transactions in flight go on to a final state. The pause is recorded with its audit record
// in one transaction, and takes the roster row's lock, which waits for every writer batch
// allocating for the signer: none allocates after it. Pausing a paused signer answers it as
// it is.
func (r *SignerRoster) Pause(ctx context.Context, signer, note, by string) (RosterEntry, error) {
	return r.setPaused(ctx, signer, note, by, true)
}

// Resume lets a paused signer take creates again.
func (r *SignerRoster) Resume(ctx context.Context, signer, note, by string) (RosterEntry, error) {
	return r.setPaused(ctx, signer, note, by, false)
}

// maxNoteLength bounds an operator's note, which is stored and audited.
const maxNoteLength = 1000

func (r *SignerRoster) setPaused(ctx context.Context, signer, note, by string, pause bool) (RosterEntry, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return RosterEntry{}, err
	}
	if len(note) > maxNoteLength {
		return RosterEntry{}, &domain.ValidationError{Field: "note", Reason: fmt.Sprintf("%d characters, at most %d", len(note), maxNoteLength)}
	}
	var row domain.RosterSigner
	err = r.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("roster.pause"), func(ctx context.Context, sess txmanager.Session) error {
		var changed bool
		var err error
		if pause {
			row, changed, err = r.store.PauseRosterSigner(ctx, sess, addr, by, note)
		} else {
			row, changed, err = r.store.ResumeRosterSigner(ctx, sess, addr)
		}
		if err != nil || !changed {
			return err
		}
		action, after := domain.AuditSignerResumed, map[string]any{"paused": false, "note": note}
		if pause {
			action, after = domain.AuditSignerPaused, map[string]any{"paused": true, "note": note}
		}
		return r.audit.Record(ctx, sess, by, action, "signer "+addr.Hex(), map[string]any{"paused": !pause}, after)
	})
	if err != nil {
		return RosterEntry{}, err
	}
	r.mu.Lock()
	r.keys.Apply(row)
	r.mu.Unlock()
	if pause {
		r.log.Infow("msg", "signer paused: no new transaction is accepted for it until resumed", "signer", addr.Hex(), "by", by, "note", note)
	} else {
		r.log.Infow("msg", "signer resumed", "signer", addr.Hex(), "by", by, "note", note)
	}
	return r.withUnfinished(ctx, row)
}

// rosterAudit is a roster row as its audit records show it.
func rosterAudit(row domain.RosterSigner) map[string]any {
	return map[string]any{"signer": row.Signer.Hex(), "source": string(row.Source), "keyRef": row.KeyRef, "state": string(row.State),
		"paused": row.PausedAt != nil, "note": row.Note}
}
