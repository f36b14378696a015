package services

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// SigningStallConfig bounds how long a signer whose key source fails keeps taking work.
type SigningStallConfig struct {
	// MaxUnsigned: with the key source failing, creates are refused once this many of the
	// signer's transactions wait for a signature.
	MaxUnsigned int
	// MaxDuration: ... or once it has failed this long.
	MaxDuration time.Duration
}

// SigningHealthStore records and reads a signer's signing condition.
type SigningHealthStore interface {
	// RecordSigningHealth records, fenced on lease, that the signer's key source fails
	// (failingSince, lastError) or signs again (failingSince nil). wasFailing is whether
	// the record said it failed before this write, whoever wrote that.
	RecordSigningHealth(ctx context.Context, lease domain.Lease, failingSince *time.Time, lastError string) (wasFailing bool, err error)
	// UnsignedBacklog is how many of the signer's transactions wait for their first
	// signature.
	UnsignedBacklog(ctx context.Context, signer string) (int, error)
	// Signing failures and their end are told to webhook subscribers.
	EventAppender
}

// SigningHealth follows, on the node driving each signer, whether its key source signs.
// The submitting stage reports every batch's outcome; creates ask Admit before they take a
// nonce, so a signer that cannot sign stops accumulating work it cannot do, and serves again
// by itself with the first signature that succeeds. What it finds is recorded in the
// database for every node to show (signer status, the transactions waiting, the gauges).
type SigningHealth struct {
	cfg   SigningStallConfig
	store SigningHealthStore
	clock Clock
	log   *log.Helper

	// current, once FollowLeases is called, is the lease this node holds on a signer now: a
	// pass that signed under a lease since ended reports into nothing.
	current func(signer string) (domain.Lease, bool)

	mu      sync.Mutex
	signers map[string]*signingState
	// signedUnder is, per signer, the lease token under which this node last recorded a
	// success: the first under each lease is recorded, since a failure recorded by an
	// earlier owner, or by this node before a restart, is not known here.
	signedUnder map[string]uint64
}

// signingState is one signer's signing condition on this node.
type signingState struct {
	// token is the lease the condition was seen under: another lease's owner learns it anew.
	token uint64
	// failingSince is zero while the key source signs.
	failingSince time.Time
	lastError    string
	// unsigned is the backlog as last counted; admitted counts creates let through since.
	unsigned, admitted int
	// probedAt is when a create was last let through with nothing counted waiting.
	probedAt time.Time
	// recorded is what the database was last told, and when.
	recordedError string
	recordedAt    time.Time
}

// signingRecordEvery: a failure that goes on is recorded again at most this often (the
// error may change; its time shows the failure is current).
const signingRecordEvery = 10 * time.Second

// NewSigningHealth builds the tracker.
func NewSigningHealth(cfg SigningStallConfig, store SigningHealthStore, clock Clock, logger log.Logger) *SigningHealth {
	return &SigningHealth{cfg: cfg, store: store, clock: clock, log: log.NewHelper(log.With(logger, "component", "signing-health")),
		signers: map[string]*signingState{}, signedUnder: map[string]uint64{}}
}

// Failed records that the signer's key source failed to sign (err, the key source's
// error). Errors of the caller's own ending (shutdown) are not the key source's.
func (h *SigningHealth) Failed(ctx context.Context, lease domain.Lease, err error) {
	if err == nil || ctx.Err() != nil && errors.Is(err, ctx.Err()) || !h.stillHeld(lease) {
		return
	}
	now := h.clock.Now()
	cause := CleanSigningError(err)
	unsigned, countErr := h.store.UnsignedBacklog(ctx, lease.Signer)
	h.mu.Lock()
	st := h.state(lease)
	if st == nil {
		h.mu.Unlock()
		return
	}
	started := st.failingSince.IsZero()
	if started {
		st.failingSince = now
	}
	st.lastError = cause
	if countErr == nil {
		st.unsigned, st.admitted = unsigned, 0
	}
	record := started || cause != st.recordedError || now.Sub(st.recordedAt) >= signingRecordEvery
	since := st.failingSince
	if record {
		st.recordedError, st.recordedAt = cause, now
	}
	backlog := st.unsigned + st.admitted
	h.mu.Unlock()
	if started {
		h.log.WithContext(ctx).Errorw("msg", "signer's key source cannot sign; its transactions wait, and new ones are held back past the bound",
			"signer", lease.Signer, "fencing_token", lease.Token, "unsigned", backlog, "error", cause,
			"max_unsigned", h.cfg.MaxUnsigned, "max_duration", h.cfg.MaxDuration.String())
		RecordEvent(ctx, h.store, h.log, SignerEvent(domain.EventSigningFailing, 0, common.HexToAddress(lease.Signer), map[string]any{"signer": lease.Signer, "error": cause, "unsigned": backlog}))
	}
	if record {
		if _, err := h.store.RecordSigningHealth(ctx, lease, &since, cause); err != nil && !errors.Is(err, domain.ErrFenced) {
			h.log.WithContext(ctx).Warnw("msg", "could not record the signer's signing failure", "signer", lease.Signer, "error", err.Error())
		}
	}
}

// Observe records what a signature of the signer's key source came to: Failed with its
// error, Signed without one. Every stage that signs reports through it (nil: nothing kept).
func (h *SigningHealth) Observe(ctx context.Context, lease domain.Lease, err error) {
	if h == nil {
		return
	}
	if err != nil {
		h.Failed(ctx, lease, err)
		return
	}
	h.Signed(ctx, lease)
}

// Signed records that the signer's key source signed: a failure it had is over, whether
// this node saw it or the record holds one from an earlier owner or process (checked once
// a lease).
func (h *SigningHealth) Signed(ctx context.Context, lease domain.Lease) {
	if !h.stillHeld(lease) {
		return
	}
	h.mu.Lock()
	st, ok := h.signers[lease.Signer]
	failingHere := ok && st.token == lease.Token && !st.failingSince.IsZero()
	if !failingHere && h.signedUnder[lease.Signer] == lease.Token {
		h.mu.Unlock()
		return
	}
	var since time.Time
	if ok && st.token <= lease.Token {
		since = st.failingSince
		delete(h.signers, lease.Signer)
	}
	h.signedUnder[lease.Signer] = lease.Token
	h.mu.Unlock()
	wasFailing, err := h.store.RecordSigningHealth(ctx, lease, nil, "")
	if err != nil {
		h.mu.Lock()
		if h.signedUnder[lease.Signer] == lease.Token {
			delete(h.signedUnder, lease.Signer) // the next success tries again
		}
		h.mu.Unlock()
		if !errors.Is(err, domain.ErrFenced) {
			h.log.WithContext(ctx).Warnw("msg", "could not record that the signer signs", "signer", lease.Signer, "error", err.Error())
		}
	}
	if !failingHere && !wasFailing {
		return
	}
	payload := map[string]any{"signer": lease.Signer}
	if failingHere {
		payload["failedSeconds"] = h.clock.Now().Sub(since).Seconds()
	}
	h.log.WithContext(ctx).Warnw("msg", "signer's key source signs again; its creates are accepted", "signer", lease.Signer,
		"fencing_token", lease.Token, "failure_seen_here", failingHere)
	RecordEvent(ctx, h.store, h.log, SignerEvent(domain.EventSigningResumed, 0, common.HexToAddress(lease.Signer), payload))
}

// Failing is whether the signer's key source was failing under lease when it last signed
// (nil: never).
func (h *SigningHealth) Failing(lease domain.Lease) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.signers[lease.Signer]
	return ok && st.token == lease.Token && !st.failingSince.IsZero()
}

// Admit is nil while the signer may take a new transaction under lease: its key source
// signs, or has failed for less than the bound with fewer transactions waiting than the
// bound, or nothing at all waits for a signature. Otherwise it says why, with a time to
// retry after. A create let through is counted in the backlog.
//
// With nothing waiting, one create goes through whatever the failure's age: only a
// signature ends a failure, and the submitter signs only what waits, so a signer whose
// backlog was emptied another way (a resolution signed, then a pass failed) would
// otherwise refuse every create for good although its key may sign again. A key that
// still cannot sign holds that one create, and the bound refuses the next.
func (h *SigningHealth) Admit(lease domain.Lease) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	st, ok := h.signers[lease.Signer]
	switch {
	case ok && st.token < lease.Token:
		// Seen under an earlier lease (a pass of it reported late): this lease's owner
		// learns the key source's condition from its own signatures.
		delete(h.signers, lease.Signer)
		return nil
	case !ok || st.token > lease.Token || st.failingSince.IsZero():
		// (A lease already replaced: its writes are fenced, and the newer one's state stays.)
		return nil
	}
	now := h.clock.Now()
	if st.unsigned == 0 && st.admitted > 0 && now.Sub(st.probedAt) >= signingRetryAfter {
		// The creates let through since nothing was counted waiting have not been signed
		// or failed by now: they did not take a nonce (a replay, a refusal by funds or
		// policy, an approval), or they would have been counted. Another may try.
		st.admitted = 0
	}
	failed := now.Sub(st.failingSince)
	unsigned := st.unsigned + st.admitted
	if unsigned > 0 && ((h.cfg.MaxDuration > 0 && failed >= h.cfg.MaxDuration) || (h.cfg.MaxUnsigned > 0 && unsigned >= h.cfg.MaxUnsigned)) {
		return &domain.SignerUnavailableError{Signer: lease.Signer, Since: st.failingSince, Unsigned: unsigned, Cause: st.lastError, RetryAfter: signingRetryAfter}
	}
	if unsigned == 0 {
		st.probedAt = now
	}
	st.admitted++
	return nil
}

// Forget drops what this node knew of a signer it no longer drives (the lease manager
// calls it whenever a lease ends): its next owner, this node again included, learns the key
// source's condition from its own signatures, and does not refuse creates for a failure
// that may long be over.
func (h *SigningHealth) Forget(signer string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.signers, signer)
	delete(h.signedUnder, signer)
}

// FollowLeases makes leases' end forget what this node knew of their signers (Forget).
// A signing pass that outlived its lease (a KMS that hangs for seconds) reports nothing
// afterwards: it would bring back, under no lease, a failure its next owner cannot end.
func (h *SigningHealth) FollowLeases(leases *LeaseManager) {
	h.current = leases.Current
	leases.OnLost(h.Forget)
}

// stillHeld is whether lease is the one this node holds on its signer now (true when the
// tracker does not follow leases).
func (h *SigningHealth) stillHeld(lease domain.Lease) bool {
	if h.current == nil {
		return true
	}
	now, ok := h.current(lease.Signer)
	return ok && now.Token == lease.Token
}

// signingRetryAfter: a held-back signer is worth asking about again this soon (the
// submitter retries its signature every pass).
const signingRetryAfter = 5 * time.Second

// state is the signer's condition under lease, begun anew when what is kept was seen under
// an earlier lease; nil when it was seen under a later one (lease is stale).
func (h *SigningHealth) state(lease domain.Lease) *signingState {
	st, ok := h.signers[lease.Signer]
	switch {
	case ok && st.token > lease.Token:
		return nil
	case !ok || st.token < lease.Token:
		st = &signingState{token: lease.Token}
		h.signers[lease.Signer] = st
	}
	return st
}

// maxSigningErrorLength bounds a key source's error as stored and shown.
const maxSigningErrorLength = 300

var (
	// longHex matches 64 hex digits or more: what a private key or a seed looks like.
	longHex = regexp.MustCompile(`(?i)(0x)?[0-9a-f]{64,}`)
	// secretParam matches a query or form parameter that carries a credential.
	secretParam = regexp.MustCompile(`(?i)((?:password|passphrase|secret|token|signature|key)=)[^&\s"]+`)
)

// CleanSigningError is a key source's error as it may be stored and shown: URLs told by
// their scheme and host alone (domain.RedactURLs), anything shaped like a private key and
// credential parameters removed, and its length bounded. A key source's errors name endpoints, key ids and what went wrong; the
// cleaning keeps those.
func CleanSigningError(err error) string {
	s := domain.RedactURLs(err.Error())
	s = longHex.ReplaceAllString(s, "[redacted]")
	s = secretParam.ReplaceAllString(s, "${1}[redacted]")
	// Valid UTF-8 whatever the source sent, and cut on a character's boundary: PostgreSQL
	// refuses anything else, and the failure would never be recorded.
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > maxSigningErrorLength {
		cut := maxSigningErrorLength
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "…"
	}
	return s
}

// KeySourceError is a key source's failure as the rest of the service carries it: its text
// is cleaned (CleanSigningError) before it can reach a log line, an API answer or a column,
// and errors.Is and errors.As still reach the cause. A remote signer's client puts its
// endpoint, with any credentials in it, into its errors.
type KeySourceError struct{ Err error }

func (e *KeySourceError) Error() string { return CleanSigningError(e.Err) }

func (e *KeySourceError) Unwrap() error { return e.Err }
