package signer

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/ethereum/go-ethereum/common"
	"google.golang.org/grpc/status"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// RosterKeys builds the key source a roster signer names and puts it into the Registry
// (services.SignerKeys). Where the key is found comes from the signers configuration: the
// keystore directory and passphrase, the KMS regions and endpoints, the clef URL. The roster
// names an account or a key id; a key never passes through the database or the admin API.
type RosterKeys struct {
	registry *Registry
	cfg      conf.Signers
	// refuse, when set, refuses signers no key source may serve here (outside development,
	// the accounts whose private keys are public), as the signers of the file are at start.
	refuse func([]common.Address) error
	// configInDir: with signers.keystore.rosterOnly, the accounts whose key file was in the
	// directory at start. A signer of the roster's source config among them served from
	// that file before the directory was kept for the roster; it is unlocked from it as the
	// roster's keystore signers are, not left with no node holding its key.
	configInDir map[common.Address]bool
}

// NewRosterKeys wires the roster's key building onto registry; refuse (nil: none) names
// the signers this node must not serve, whatever their key source.
func NewRosterKeys(registry *Registry, cfg conf.Signers, refuse func([]common.Address) error) *RosterKeys {
	k := &RosterKeys{registry: registry, cfg: cfg, refuse: refuse}
	if cfg.Keystore.RosterOnly {
		// The directory was read at start already (a node of an unreadable one does not
		// start); a file that cannot be read here only leaves its config signer unbuilt.
		files, _ := scanKeyFiles(cfg.Keystore.Dir)
		k.configInDir = make(map[common.Address]bool, len(files))
		for addr := range files {
			k.configInDir[addr] = true
		}
	}
	return k
}

// ErrNoKeySource: the signers configuration has no section for the roster signer's source
// (no keystore directory, no clef URL, ...), so this node cannot reach its key.
var ErrNoKeySource = errors.New("key source not configured on this node")

// Check reports whether this node could build entry's key source (the section it needs is
// configured), without building it.
func (k *RosterKeys) Check(entry domain.RosterSigner) error {
	switch entry.Source {
	case domain.KeySourceKeystore:
		if k.cfg.Keystore.Dir == "" {
			return fmt.Errorf("%w: signers.keystore.dir is empty", ErrNoKeySource)
		}
	case domain.KeySourceExternal:
		if k.cfg.External.URL == "" {
			return fmt.Errorf("%w: signers.external.url is empty", ErrNoKeySource)
		}
	case domain.KeySourceAWSKMS, domain.KeySourceGCPKMS:
	case domain.KeySourceConfig:
		if !k.configInDir[entry.Signer] {
			return fmt.Errorf("%w: source config (a signer of a node's file), with no file for it in a keystore directory kept for the roster", ErrNoKeySource)
		}
	default:
		return fmt.Errorf("%w: source %q", ErrNoKeySource, entry.Source)
	}
	return nil
}

// Build builds entry's key source, checks it holds entry's signer, and puts it into
// service. ctx bounds the look-ups (a KMS public key, clef's account list).
func (k *RosterKeys) Build(ctx context.Context, entry domain.RosterSigner) error {
	if err := k.Check(entry); err != nil {
		return err
	}
	addr := entry.Signer.Hex()
	var (
		src     Source
		release func()
		err     error
	)
	switch entry.Source {
	case domain.KeySourceKeystore, domain.KeySourceConfig: // config: as Check allows, from the roster's directory
		ks := k.cfg.Keystore
		ks.Addresses = []string{addr}
		src, release, err = NewKeystoreSource(ks)
	case domain.KeySourceExternal:
		src, release, err = NewExternalSource(ctx, k.cfg.External.URL, []common.Address{entry.Signer}, k.cfg.External.Timeout.Std())
	case domain.KeySourceAWSKMS:
		aws := k.cfg.AWSKMS
		aws.Keys = []conf.KMSKey{{ID: entry.KeyRef, Address: addr}}
		src, err = NewAWSKMSSource(ctx, aws)
	case domain.KeySourceGCPKMS:
		gcp := k.cfg.GCPKMS
		gcp.Keys = []conf.KMSKey{{ID: entry.KeyRef, Address: addr}}
		src, release, err = NewGCPKMSSource(ctx, gcp)
	}
	if err != nil {
		if unreachable(err) {
			return fmt.Errorf("signer %s: %w: %w", entry, domain.ErrKeySourceUnreachable, err)
		}
		return fmt.Errorf("signer %s: %w", entry, err)
	}
	if got := src.Addresses(); len(got) != 1 || got[0] != entry.Signer {
		if release != nil {
			release()
		}
		return fmt.Errorf("signer %s: the key source holds %v, not the signer", entry, got)
	}
	if k.refuse != nil {
		if err := k.refuse(src.Addresses()); err != nil {
			if release != nil {
				release()
			}
			return fmt.Errorf("signer %s: %w", entry, err)
		}
	}
	if err := k.registry.Add(src, release, entry.State, entry.PausedAt != nil); err != nil {
		if release != nil {
			release()
		}
		return fmt.Errorf("signer %s: %w", entry, err)
	}
	return nil
}

// State is the roster state the registry applies to signer, and whether its key is held.
func (k *RosterKeys) State(signer common.Address) (domain.RosterState, bool) {
	return k.registry.State(signer)
}

// Apply sets entry's roster state on the registry (creates refused while retiring, the key
// dropped once retired).
func (k *RosterKeys) Apply(entry domain.RosterSigner) {
	k.registry.SetState(entry.Signer, entry.State)
	k.registry.SetPaused(entry.Signer, entry.PausedAt != nil)
}

// Close releases every key source built for the roster.
func (k *RosterKeys) Close() { k.registry.Close() }

// unreachable: the key source did not answer for now, as opposed to answering that the key
// is not there or not usable: a deadline, a network failure, throttling or a fault of the
// KMS itself (AWS's error codes, Google's gRPC codes).
func unreachable(err error) bool {
	var netErr net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr) {
		return true
	}
	var coded interface{ ErrorCode() string }
	if errors.As(err, &coded) {
		switch coded.ErrorCode() {
		case "ThrottlingException", "KMSInternalException", "DependencyTimeoutException", "ServiceUnavailableException", "InternalFailure":
			return true
		}
	}
	if st, ok := status.FromError(err); ok && gcpRetryableCodes[st.Code()] {
		return true
	}
	return false
}
