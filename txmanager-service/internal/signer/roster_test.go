package signer_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

func TestRosterKeysCheckNamesTheMissingSection(t *testing.T) {
	t.Parallel()
	keys := signer.NewRosterKeys(signer.NewRegistry(nil), conf.Signers{}, nil)
	addr := addressOf(newKey(t))
	tests := []struct {
		source  domain.KeySourceKind
		wantKey string
	}{
		{domain.KeySourceKeystore, "signers.keystore.dir"},
		{domain.KeySourceExternal, "signers.external.url"},
		{domain.KeySourceAWSKMS, ""},
		{domain.KeySourceGCPKMS, ""},
		{domain.KeySourceConfig, "config"},
	}
	for _, tt := range tests {
		t.Run(string(tt.source), func(t *testing.T) {
			t.Parallel()
			err := keys.Check(domain.RosterSigner{Signer: addr, Source: tt.source})
			if tt.wantKey == "" {
				if err != nil {
					t.Fatalf("Check = %v; KMS needs no section (the SDK's defaults reach it)", err)
				}
				return
			}
			if !errors.Is(err, signer.ErrNoKeySource) || !strings.Contains(err.Error(), tt.wantKey) {
				t.Fatalf("Check = %v, want ErrNoKeySource naming %s", err, tt.wantKey)
			}
		})
	}
}

// With a keystore directory kept for the roster, a signer of the roster's source config
// whose file is in the directory (it served from the file before) is built from it; one
// without a file there is left to the node whose file names it.
func TestRosterKeysBuildAConfigSignerFromADirectoryKeptForTheRoster(t *testing.T) {
	t.Parallel()
	ks := fixture
	registry := signer.NewRegistry(nil)
	keys := signer.NewRosterKeys(registry, conf.Signers{Keystore: conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile, RosterOnly: true}}, nil)
	inDir := domain.RosterSigner{Signer: ks.accounts[0], Source: domain.KeySourceConfig, State: domain.RosterActive}
	elsewhere := domain.RosterSigner{Signer: addressOf(newKey(t)), Source: domain.KeySourceConfig, State: domain.RosterActive}
	if err := keys.Check(elsewhere); !errors.Is(err, signer.ErrNoKeySource) || !strings.Contains(err.Error(), "source config") {
		t.Fatalf("Check of a config signer without a file = %v, want ErrNoKeySource naming source config", err)
	}
	if err := keys.Check(inDir); err != nil {
		t.Fatalf("Check of a config signer with its file in the directory = %v", err)
	}
	if err := keys.Build(context.Background(), inDir); err != nil {
		t.Fatal(err)
	}
	if state, held := keys.State(inDir.Signer); !held || state != domain.RosterActive || registry.Accepts(inDir.Signer) != nil {
		t.Fatalf("built config signer: state %s, held %t, accepts %v", state, held, registry.Accepts(inDir.Signer))
	}
	// Without rosterOnly the node's file serves its config signers at start; the roster
	// builds none.
	plain := signer.NewRosterKeys(signer.NewRegistry(nil), conf.Signers{Keystore: conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile}}, nil)
	if err := plain.Check(inDir); !errors.Is(err, signer.ErrNoKeySource) {
		t.Fatalf("Check of a config signer without rosterOnly = %v, want ErrNoKeySource", err)
	}
}

// A keystore signer added at run time is found in the configured directory (a mounted
// Secret), unlocked with the configured passphrase, and served; once retired its key is
// dropped.
func TestRosterKeysBuildAKeystoreSigner(t *testing.T) {
	t.Parallel()
	ks := fixture
	registry := signer.NewRegistry(nil)
	keys := signer.NewRosterKeys(registry, conf.Signers{Keystore: conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile, RosterOnly: true}}, nil)
	entry := domain.RosterSigner{Signer: ks.accounts[1], Source: domain.KeySourceKeystore, State: domain.RosterActive}
	if err := keys.Build(context.Background(), entry); err != nil {
		t.Fatal(err)
	}
	if state, held := keys.State(entry.Signer); !held || state != domain.RosterActive || registry.Accepts(entry.Signer) != nil {
		t.Fatalf("built signer: state %s held %t accepts %v", state, held, registry.Accepts(entry.Signer))
	}
	if registry.Manages(ks.accounts[0]) {
		t.Fatal("building one signer put the directory's other accounts into service")
	}
	tx := dynamicFeeTx(5)
	signed, err := registry.SignTx(context.Background(), entry.Signer, tx, testChainID)
	if err != nil {
		t.Fatal(err)
	}
	requireSignedBy(t, signed, tx, entry.Signer)
	if err := keys.Build(context.Background(), entry); err == nil {
		t.Fatal("a second key source for a held signer was built")
	}

	missing := domain.RosterSigner{Signer: addressOf(newKey(t)), Source: domain.KeySourceKeystore}
	if err := keys.Build(context.Background(), missing); err == nil || !strings.Contains(err.Error(), missing.Signer.Hex()) {
		t.Fatalf("building a signer without a key file: %v, want an error naming it", err)
	}

	entry.State = domain.RosterRetired
	keys.Apply(entry)
	if _, held := keys.State(entry.Signer); held || !errors.Is(registry.Accepts(entry.Signer), domain.ErrSignerRetired) {
		t.Fatal("a retired signer's key is still held or it still accepts creates")
	}
	keys.Close()
}

// A signer the node must not serve (outside development, an account whose private key is
// public) is refused when the roster builds it, as it is at start from the file: its key is
// read, refused, and not held.
func TestRosterKeysRefuseTheSignersTheNodeMustNotServe(t *testing.T) {
	t.Parallel()
	ks := fixture
	registry := signer.NewRegistry(nil)
	refused := ks.accounts[0]
	keys := signer.NewRosterKeys(registry, conf.Signers{Keystore: conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile, RosterOnly: true}},
		func(addrs []common.Address) error {
			if slices.Contains(addrs, refused) {
				return errors.New("its private key is public")
			}
			return nil
		})
	defer keys.Close()
	err := keys.Build(context.Background(), domain.RosterSigner{Signer: refused, Source: domain.KeySourceKeystore, State: domain.RosterActive})
	if err == nil || !strings.Contains(err.Error(), "its private key is public") || !strings.Contains(err.Error(), refused.Hex()) {
		t.Fatalf("building a refused signer: %v, want the refusal naming it", err)
	}
	if _, held := keys.State(refused); held || registry.Manages(refused) {
		t.Fatal("a refused signer's key is held")
	}
	other := domain.RosterSigner{Signer: ks.accounts[1], Source: domain.KeySourceKeystore, State: domain.RosterActive}
	if err := keys.Build(context.Background(), other); err != nil {
		t.Fatalf("building a signer the node may serve: %v", err)
	}
}
