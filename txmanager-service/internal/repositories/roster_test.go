package repositories_test

import (
	"errors"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A signer's roster row through its life, each step on what the earlier ones left: a file's
// signers registered without overwriting what an operator recorded, one added at run time,
// a retirement that waits for the signer's unfinished transactions and completes once they
// are final, and a retired signer put into service again.
func TestRosterRepositoryLifecycle(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	roster := repositories.NewRosterRepository(pool)
	fromFile, added := testsupport.SignerAddress(200), testsupport.SignerAddress(201)
	state := func(signer common.Address) domain.RosterState {
		t.Helper()
		row, err := roster.GetRosterSigner(t.Context(), signer)
		if err != nil {
			t.Fatal(err)
		}
		return row.State
	}
	steps := []struct {
		name string
		do   func() (changed bool, err error)
		// wantChanged is what the call reports; want the signers' states after it.
		wantChanged bool
		want        map[common.Address]domain.RosterState
	}{
		{"a node registers its file's signer", func() (bool, error) {
			return true, roster.RegisterConfigSigners(t.Context(), "node-a", []common.Address{fromFile})
		}, true, map[common.Address]domain.RosterState{fromFile: domain.RosterActive}},
		{"an operator adds a keystore signer", func() (bool, error) {
			row, ok, err := roster.AddRosterSigner(t.Context(), domain.RosterSigner{Signer: added, Source: domain.KeySourceKeystore, KeyRef: "key-1", Note: "new"}, "operator")
			if err == nil && (row.Source != domain.KeySourceKeystore || row.KeyRef != "key-1" || row.AddedBy != "operator") {
				t.Errorf("added row %+v", row)
			}
			return ok, err
		}, true, map[common.Address]domain.RosterState{fromFile: domain.RosterActive, added: domain.RosterActive}},
		{"adding it again changes nothing", func() (bool, error) {
			row, ok, err := roster.AddRosterSigner(t.Context(), domain.RosterSigner{Signer: added, Source: domain.KeySourceExternal}, "other")
			if err == nil && row.Source != domain.KeySourceKeystore {
				t.Errorf("the active row's source became %s", row.Source)
			}
			return ok, err
		}, false, map[common.Address]domain.RosterState{added: domain.RosterActive}},
		{"the operator retires the file's signer", func() (bool, error) {
			row, ok, err := roster.RetireRosterSigner(t.Context(), fromFile, "operator", "rotation")
			if err == nil && (row.RetiringAt == nil || row.RetiredBy != "operator" || row.Note != "rotation") {
				t.Errorf("retiring row %+v", row)
			}
			return ok, err
		}, true, map[common.Address]domain.RosterState{fromFile: domain.RosterRetiring}},
		{"a retiring signer is not retired again", func() (bool, error) {
			_, ok, err := roster.RetireRosterSigner(t.Context(), fromFile, "operator", "again")
			return ok, err
		}, false, map[common.Address]domain.RosterState{fromFile: domain.RosterRetiring}},
		{"its file registering it again keeps the retirement", func() (bool, error) {
			return false, roster.RegisterConfigSigners(t.Context(), "node-b", []common.Address{fromFile})
		}, false, map[common.Address]domain.RosterState{fromFile: domain.RosterRetiring}},
		{"retirement waits for an unfinished transaction", func() (bool, error) {
			if _, err := pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
				VALUES (1337, gen_random_uuid(), $1, '\x00', 0, '{"value":"0"}', 'TRACKING', 1)`, fromFile.Hex()); err != nil {
				t.Fatal(err)
			}
			if n, err := roster.CountUnfinished(t.Context(), fromFile); err != nil || n != 1 {
				t.Errorf("unfinished %d (%v), want 1", n, err)
			}
			_, done, err := roster.CompleteRetirement(t.Context(), fromFile)
			return done, err
		}, false, map[common.Address]domain.RosterState{fromFile: domain.RosterRetiring}},
		{"retirement completes once it is final", func() (bool, error) {
			if _, err := pool.Exec(t.Context(), "UPDATE managed_tx SET state = 'CONFIRMED', confirmed_at = now() WHERE signer = $1", fromFile.Hex()); err != nil {
				t.Fatal(err)
			}
			row, done, err := roster.CompleteRetirement(t.Context(), fromFile)
			if err == nil && done && row.RetiredAt == nil {
				t.Errorf("retired row %+v has no retirement time", row)
			}
			return done, err
		}, true, map[common.Address]domain.RosterState{fromFile: domain.RosterRetired}},
		{"a retired signer put into service again", func() (bool, error) {
			row, ok, err := roster.AddRosterSigner(t.Context(), domain.RosterSigner{Signer: fromFile, Source: domain.KeySourceGCPKMS, KeyRef: "projects/p/k"}, "operator")
			if err == nil && (row.RetiredAt != nil || row.RetiringAt != nil) {
				t.Errorf("the row put back into service keeps its retirement: %+v", row)
			}
			return ok, err
		}, true, map[common.Address]domain.RosterState{fromFile: domain.RosterActive, added: domain.RosterActive}},
	}
	for _, s := range steps {
		changed, err := s.do()
		if err != nil || changed != s.wantChanged {
			t.Fatalf("%s: changed %t (%v), want %t", s.name, changed, err, s.wantChanged)
		}
		for signer, want := range s.want {
			if got := state(signer); got != want {
				t.Fatalf("%s: %s is %s, want %s", s.name, signer.Hex(), got, want)
			}
		}
	}
	all, err := roster.ListRoster(t.Context())
	if err != nil || len(all) != 2 {
		t.Fatalf("roster %+v (%v), want the two signers", all, err)
	}
	if _, err := roster.GetRosterSigner(t.Context(), testsupport.SignerAddress(202)); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a signer without a row: %v, want NOT_FOUND", err)
	}
	if _, ok, err := roster.RetireRosterSigner(t.Context(), testsupport.SignerAddress(203), "operator", "never seen"); err != nil || !ok {
		t.Fatalf("retiring a file signer without a row: %t, %v; want a retiring row made for it", ok, err)
	}
}
