package receipts

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
)

// listingStore answers the listing with rows, running meanwhile what other stages commit
// while the query runs; the tracker's other writes are not part of these tests.
type listingStore struct {
	rows       []pipeline.TrackedTx
	meanwhile  func()
	errNotUsed error
}

func (s listingStore) ListAwaitingReceipt(context.Context, []string) ([]pipeline.TrackedTx, error) {
	s.meanwhile()
	return slices.Clone(s.rows), nil
}

func (s listingStore) RecordReceipts(context.Context, domain.Lease, []FoundReceipt) (int, error) {
	return 0, s.errNotUsed
}

func (s listingStore) ListMined(context.Context, []string) ([]MinedTx, error) {
	return nil, s.errNotUsed
}

func (s listingStore) RevertReorged(context.Context, domain.Lease, []MinedTx) (int, error) {
	return 0, s.errNotUsed
}

func (s listingStore) Finalize(context.Context, domain.Lease, []Finalization) (int, error) {
	return 0, s.errNotUsed
}

// The listing of transactions awaiting receipts leaves out every one whose receipt is held,
// also one whose hold ends while the listing runs: a finality pass that commits meanwhile
// makes the row final, but the listing (a snapshot from before that commit) still shows it
// awaiting, and put back on the schedule it was looked up by hash again.
func TestAwaitingReceiptLeavesOutHeldReceipts(t *testing.T) {
	tests := []struct {
		name string
		// heldBefore: its receipt is held when the listing starts.
		heldBefore bool
		// meanwhile is what happens to its hold while the listing runs.
		meanwhile func(h *heldReceipts, found FoundReceipt)
		want      bool
	}{
		{name: "never held: awaiting", want: true},
		{name: "held throughout", heldBefore: true, want: false},
		{name: "made final while listed (hold released)", heldBefore: true,
			meanwhile: func(h *heldReceipts, f FoundReceipt) { h.release(f.TxID) }, want: false},
		{name: "found and held while listed", meanwhile: func(h *heldReceipts, f FoundReceipt) { h.hold(f, time.Now()) }, want: false},
		{name: "held too long and written as a plain receipt while listed", heldBefore: true,
			meanwhile: func(h *heldReceipts, _ FoundReceipt) { h.expired(time.Now().Add(time.Hour)) }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other, subject := tracked(), tracked()
			found := FoundReceipt{TxID: subject.TxID, Signer: subject.Signer}
			tracker := &Tracker{}
			if tt.heldBefore {
				tracker.held.hold(found, time.Now())
			}
			tracker.store = listingStore{rows: []pipeline.TrackedTx{other, subject}, errNotUsed: errors.New("not part of the test"), meanwhile: func() {
				if tt.meanwhile != nil {
					tt.meanwhile(&tracker.held, found)
				}
			}}
			got, err := tracker.AwaitingReceipt(context.Background(), []string{subject.Signer})
			if err != nil {
				t.Fatal(err)
			}
			listed := slices.ContainsFunc(got, func(tx pipeline.TrackedTx) bool { return tx.TxID == subject.TxID })
			if listed != tt.want || !slices.ContainsFunc(got, func(tx pipeline.TrackedTx) bool { return tx.TxID == other.TxID }) {
				t.Fatalf("listed %v (the other row: %v), want %v and the other row listed", listed, len(got) > 0 && got[0].TxID == other.TxID, tt.want)
			}
		})
	}
}
