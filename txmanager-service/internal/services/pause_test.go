package services_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A pause waits for the batch in flight (its creates commit before it), every batch after
// it allocates nothing (a retry of a create on record is still answered), and a resume lets
// creates in again from the next nonce. Both are in the audit trail.
func TestPauseWaitsForTheBatchInFlightAndRefusesTheNext(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(31)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	keys := newFakeKeys(signer)
	roster := newTestRoster(t, pool, keys, node.Leases)
	if err := repositories.NewRosterRepository(pool).RegisterConfigSigners(t.Context(), "node-a", []common.Address{signer}); err != nil {
		t.Fatal(err)
	}
	if _, errs := testsupport.Results(t, node.Allocate(t, signer, 1, "before")); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}

	gate := testsupport.NewGate()
	node.Store.SetGates(nil, gate)
	inFlight := make(chan []*writer.Op, 1)
	go func() { inFlight <- node.Allocate(t, signer, 2) }()
	<-gate.Reached
	paused := make(chan error, 1)
	go func() {
		_, err := roster.Pause(context.Background(), signer.Hex(), "key may have leaked", "alice")
		paused <- err
	}()
	select {
	case err := <-paused:
		t.Fatalf("the pause was recorded while a batch held the signer (err %v)", err)
	case <-time.After(500 * time.Millisecond):
	}
	close(gate.Release)
	if _, errs := testsupport.Results(t, <-inFlight); errors.Join(errs...) != nil {
		t.Fatalf("the batch in flight was refused: %v", errors.Join(errs...))
	}
	if err := <-paused; err != nil {
		t.Fatal(err)
	}

	// After the pause: new creates refused, the retry of one on record answered.
	txs, errs := testsupport.Results(t, node.Allocate(t, signer, 2, "before", "after"))
	if errs[0] != nil || txs[0].Nonce != 0 {
		t.Errorf("retry of a create on record: nonce %d err %v, want its transaction", txs[0].Nonce, errs[0])
	}
	if !errors.Is(errs[1], domain.ErrSignerPaused) {
		t.Errorf("create after the pause: %v, want ErrSignerPaused", errs[1])
	}
	entry, err := roster.Pause(t.Context(), signer.Hex(), "again", "bob")
	if err != nil || entry.PausedBy != "alice" || entry.PauseNote != "key may have leaked" {
		t.Errorf("pausing a paused signer: %+v %v, want it as the first pause left it", entry.RosterSigner, err)
	}

	if _, err := roster.Resume(t.Context(), signer.Hex(), "rotated the API key", "alice"); err != nil {
		t.Fatal(err)
	}
	txs, errs = testsupport.Results(t, node.Allocate(t, signer, 1, "after"))
	if errs[0] != nil || txs[0].Nonce != 3 {
		t.Fatalf("create after the resume: nonce %d err %v, want nonce 3", txs[0].Nonce, errs[0])
	}

	records, err := testsupport.AuditTrail(t, pool, "node-a").List(t.Context(), servicesAuditAll())
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, r := range records {
		actions = append(actions, r.Action+" by "+r.Actor)
	}
	if len(actions) != 2 || actions[0] != "signer.pause by alice" || actions[1] != "signer.resume by alice" {
		t.Errorf("audit trail %v, want the pause and the resume (the second pause changed nothing)", actions)
	}

	for _, bad := range []struct{ signer, note string }{{"0x12", ""}, {signer.Hex(), string(make([]byte, 1001))}, {testsupport.SignerAddress(99).Hex(), ""}} {
		if _, err := roster.Pause(t.Context(), bad.signer, bad.note, "alice"); err == nil {
			t.Errorf("pause of %q with a %d-character note was accepted", bad.signer, len(bad.note))
		}
	}
}
