package domain

import (
	"fmt"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// RosterState is where a signer stands in the signer roster.
type RosterState string

// Roster states: active serves creates; retiring refuses new creates while its unfinished
// transactions reach a final state; retired has none left and holds no lease.
const (
	RosterActive   RosterState = "active"
	RosterRetiring RosterState = "retiring"
	RosterRetired  RosterState = "retired"
)

// AcceptsCreates reports whether a signer in this state may be given new transactions.
// An unknown state (a newer version's) refuses: serving a signer an operator may have
// retired is the one mistake that cannot be taken back.
func (s RosterState) AcceptsCreates() bool { return s == RosterActive }

// KeySourceKind says where a roster signer's key lives. The roster names the key (an
// account, a KMS key id), never holds it.
type KeySourceKind string

// Key sources. KeySourceConfig is a signer of a node's configuration file (its key source
// is that file's); the others are signers added at run time, whose key is found through
// the matching section of the signers configuration (keystore directory and passphrase,
// KMS region and endpoint, clef URL).
const (
	KeySourceConfig   KeySourceKind = "config"
	KeySourceKeystore KeySourceKind = "keystore"
	KeySourceAWSKMS   KeySourceKind = "awsKms"
	KeySourceGCPKMS   KeySourceKind = "gcpKms"
	KeySourceExternal KeySourceKind = "external"
)

// maxKeyRefLength bounds a key reference (a Cloud KMS key version name is the longest).
const maxKeyRefLength = 512

// RosterSigner is one signer of the roster.
type RosterSigner struct {
	Signer common.Address
	Source KeySourceKind
	// KeyRef names the key in its source: the AWS or Cloud KMS key id; empty for a keystore
	// account or a clef account (the address names it) and for configuration signers.
	KeyRef     string
	State      RosterState
	AddedAt    time.Time
	AddedBy    string
	RetiringAt *time.Time
	RetiredAt  *time.Time
	RetiredBy  string
	Note       string
	UpdatedAt  time.Time
	// PausedAt is set while an operator has the signer paused: it refuses new creates, its
	// transactions in flight go on. Independent of State.
	PausedAt  *time.Time
	PausedBy  string
	PauseNote string
}

// SameKey reports whether r names the key that other names.
func (r RosterSigner) SameKey(other RosterSigner) bool {
	return r.Signer == other.Signer && r.Source == other.Source && r.KeyRef == other.KeyRef
}

// ParseRosterAddition checks an operator's request to put a signer into service.
func ParseRosterAddition(signer, source, keyRef string) (RosterSigner, error) {
	addr, err := ParseAddress("signer", signer)
	if err != nil {
		return RosterSigner{}, err
	}
	kind := KeySourceKind(source)
	keyRef = strings.TrimSpace(keyRef)
	switch kind {
	case KeySourceKeystore, KeySourceExternal:
		if keyRef != "" {
			return RosterSigner{}, invalid("keyRef", "must be empty for source %q: the signer's address names its account", source)
		}
	case KeySourceAWSKMS, KeySourceGCPKMS:
		if keyRef == "" {
			return RosterSigner{}, invalid("keyRef", "required for source %q: the KMS key id", source)
		}
		if len(keyRef) > maxKeyRefLength {
			return RosterSigner{}, invalid("keyRef", "longer than %d characters", maxKeyRefLength)
		}
	default:
		return RosterSigner{}, invalid("source", "must be one of %q, %q, %q, %q", KeySourceKeystore, KeySourceAWSKMS, KeySourceGCPKMS, KeySourceExternal)
	}
	return RosterSigner{Signer: addr, Source: kind, KeyRef: keyRef, State: RosterActive}, nil
}

// String names the signer and its key source for logs and errors (never key material).
func (r RosterSigner) String() string {
	if r.KeyRef == "" {
		return fmt.Sprintf("%s (%s)", r.Signer.Hex(), r.Source)
	}
	return fmt.Sprintf("%s (%s %s)", r.Signer.Hex(), r.Source, r.KeyRef)
}
