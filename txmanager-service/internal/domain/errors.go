package domain

import (
	"errors"
	"fmt"
	"time"
)

// Domain errors. Controllers map each to a stable API reason.
var (
	// ErrFenced: a critical write was rejected because this node no longer holds the
	// signer's lease with the token it wrote with.
	ErrFenced = errors.New("fenced: lease for signer lost")
	// ErrNotLeader: another node holds the signer's lease.
	ErrNotLeader = errors.New("not the lease owner for signer")
	// ErrIdempotencyConflict: the requestId was already used with a different intent.
	ErrIdempotencyConflict = errors.New("requestId already used with a different intent")
	// ErrNotFound: no such transaction.
	ErrNotFound = errors.New("transaction not found")
	// ErrInvalidArgument: the request is malformed or out of bounds.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownSigner: the service manages no key for the signer.
	ErrUnknownSigner = errors.New("signer is not managed by this service")
	// ErrIntentReverts: gas estimation shows the intent would revert.
	ErrIntentReverts = errors.New("intent reverts")
	// ErrInsufficientFunds: the signer cannot pay for the intent (its value plus its most
	// expensive gas) out of what its unfinished transactions leave of its balance.
	ErrInsufficientFunds = errors.New("insufficient funds")
	// ErrUnavailable: a dependency (database, chain, queue capacity) cannot serve now.
	ErrUnavailable = errors.New("service unavailable")
	// ErrOutcomeUnknown: the write's commit was in flight when the database connection
	// failed; it may have landed. Retrying with the same requestId returns the transaction
	// if it did, and creates it once if it did not.
	ErrOutcomeUnknown = errors.New("outcome unknown: retry with the same requestId")
	// ErrSentUnanswered: a request went to another node, which gave no answer to it (the
	// connection broke, or the answer left it out): it may have been carried out there.
	ErrSentUnanswered = errors.New("sent to another node and not answered")
	// ErrSignerQuarantined: the chain holds nonces of the signer the database does not know
	// (commits lost in a database failover, or the key used elsewhere); no nonce is
	// allocated until an operator releases it.
	ErrSignerQuarantined = errors.New("signer quarantined")
	// ErrSignerRetired: an operator retired the signer (roster state retiring or retired);
	// it accepts no new transaction, while the ones it already has still reach a final state.
	ErrSignerRetired = errors.New("signer retired: it accepts no new transactions")
	// ErrSignerPaused: an operator paused the signer; it accepts no new transaction until it
	// is resumed, while the ones it already has go on to a final state.
	ErrSignerPaused = errors.New("signer paused: it accepts no new transactions until resumed")
	// ErrSignerActive: the signer is already in service with another key source; retire it
	// before it is added with a different one.
	ErrSignerActive = errors.New("signer already active with another key source")
	// ErrSignerUnavailable: the signer's key source has failed long enough, or with enough
	// transactions waiting for a signature, that new ones are held back until it signs again.
	ErrSignerUnavailable = errors.New("signer unavailable: its key source cannot sign")
	// ErrKeySourceUnreachable: a key source did not answer for now (a deadline, a refused
	// connection, throttling, the service's own fault): asked again later, it may.
	ErrKeySourceUnreachable = errors.New("key source unreachable for now")
)

// SignerUnavailableError says why and since when a signer cannot take new transactions;
// it matches ErrSignerUnavailable.
type SignerUnavailableError struct {
	Signer string
	// Since is when its key source started failing; Unsigned is how many of its
	// transactions wait for a signature.
	Since    time.Time
	Unsigned int
	// Cause is the key source's last error, cleaned of credentials.
	Cause      string
	RetryAfter time.Duration
}

func (e *SignerUnavailableError) Error() string {
	return e.Summary() + ": " + e.Cause
}

// Summary is the condition without the key source's error, for callers who may create for
// the signer but not see its infrastructure (account ids, key ARNs, hosts): the cause is
// logged, and operators read it in the admin API.
func (e *SignerUnavailableError) Summary() string {
	return fmt.Sprintf("signer %s cannot sign: its key source has failed since %s (%d transactions wait for a signature)",
		e.Signer, e.Since.UTC().Format(time.RFC3339), e.Unsigned)
}

// Unwrap makes errors.Is(err, ErrSignerUnavailable) hold.
func (e *SignerUnavailableError) Unwrap() error { return ErrSignerUnavailable }

// ValidationError names the field that failed and why; it matches ErrInvalidArgument.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string { return fmt.Sprintf("%s: %s", e.Field, e.Reason) }

// Unwrap makes errors.Is(err, ErrInvalidArgument) hold.
func (e *ValidationError) Unwrap() error { return ErrInvalidArgument }

func invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// NotLeaderError says who holds the lease and when to try again; it matches ErrNotLeader.
type NotLeaderError struct {
	Signer     string
	Owner      string
	RetryAfter time.Duration
}

func (e *NotLeaderError) Error() string {
	return fmt.Sprintf("signer %s is served by node %s", e.Signer, e.Owner)
}

// Unwrap makes errors.Is(err, ErrNotLeader) hold.
func (e *NotLeaderError) Unwrap() error { return ErrNotLeader }

// FencedError records which write was fenced; it matches ErrFenced.
type FencedError struct {
	Signer string
	Node   string
	Token  uint64
	Write  string
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("fenced: %s for signer %s rejected (node %s, token %d)", e.Write, e.Signer, e.Node, e.Token)
}

// Unwrap makes errors.Is(err, ErrFenced) hold.
func (e *FencedError) Unwrap() error { return ErrFenced }

// UnavailableError carries a retry hint; it matches ErrUnavailable.
type UnavailableError struct {
	Reason     string
	RetryAfter time.Duration
	Err        error
}

func (e *UnavailableError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("unavailable: %s: %v", e.Reason, e.Err)
	}
	return "unavailable: " + e.Reason
}

// Unwrap exposes ErrUnavailable and the cause.
func (e *UnavailableError) Unwrap() []error {
	if e.Err != nil {
		return []error{ErrUnavailable, e.Err}
	}
	return []error{ErrUnavailable}
}

// NotFoundError is a not-found answer about something other than a transaction: What says
// what was looked for ("signer 0x... is not quarantined"). It is ErrNotFound to errors.Is,
// so callers that only ask "not found?" need not know the difference.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string        { return e.What }
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }
