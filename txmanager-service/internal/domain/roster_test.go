package domain_test

import (
	"errors"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func TestParseRosterAddition(t *testing.T) {
	t.Parallel()
	const addr = "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"
	long := make([]byte, 513)
	for i := range long {
		long[i] = 'k'
	}
	tests := []struct {
		name, signer, source, keyRef string
		wantField                    string
	}{
		{"keystore", addr, "keystore", "", ""},
		{"clef", addr, "external", "", ""},
		{"aws kms", addr, "awsKms", "alias/txm-hot-2", ""},
		{"gcp kms, spaces trimmed", addr, "gcpKms", " projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1 ", ""},
		{"keystore with a key ref", addr, "keystore", "file.json", "keyRef"},
		{"kms without a key id", addr, "awsKms", "", "keyRef"},
		{"key id too long", addr, "gcpKms", string(long), "keyRef"},
		{"configuration is not added at run time", addr, "config", "", "source"},
		{"unknown source", addr, "vault", "", "source"},
		{"bad address", "0xnothex", "keystore", "", "signer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := domain.ParseRosterAddition(tt.signer, tt.source, tt.keyRef)
			var validation *domain.ValidationError
			if tt.wantField != "" {
				if !errors.As(err, &validation) || validation.Field != tt.wantField {
					t.Fatalf("error %v, want a validation error on %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Signer.Hex() != addr || string(got.Source) != tt.source || got.State != domain.RosterActive || (got.KeyRef != "" && got.KeyRef[0] == ' ') {
				t.Fatalf("parsed %+v", got)
			}
		})
	}
}

func TestRosterStateAcceptsCreates(t *testing.T) {
	t.Parallel()
	for state, want := range map[domain.RosterState]bool{
		domain.RosterActive: true, domain.RosterRetiring: false, domain.RosterRetired: false, "": false, "paused": false,
	} {
		if got := state.AcceptsCreates(); got != want {
			t.Errorf("%q.AcceptsCreates() = %v, want %v", state, got, want)
		}
	}
}
