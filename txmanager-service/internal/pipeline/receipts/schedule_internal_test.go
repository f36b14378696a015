package receipts

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

func TestTrackUnsent(t *testing.T) {
	tracked := func() pipeline.TrackedTx {
		return pipeline.TrackedTx{TxID: uuid.New(), Signer: "0xaa", Nonce: 7, Attempts: []pipeline.AttemptRef{{Hash: common.HexToHash("0x01"), Kind: pipeline.AttemptOriginal}}}
	}
	tests := []struct {
		name string
		// scanned is the checker's covered head when the transactions are stored.
		scanned uint64
		// existing is already scheduled (listed by the database) before the note.
		existing bool
		// wantNoted: scheduled as known absent through scanned, so no look-up by hash
		// before a new block; otherwise scheduled due now, for a look-up by hash.
		wantNoted bool
	}{
		{name: "stored after blocks were covered: absent through them", scanned: 41, wantNoted: true},
		{name: "nothing covered yet: due for a look-up by hash", scanned: 0},
		{name: "already scheduled: the schedule's own state stands", scanned: 41, existing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Schedule{entries: map[uuid.UUID]*receiptEntry{}, scannedThrough: tt.scanned}
			tx := tracked()
			var before *receiptEntry
			if tt.existing {
				before = &receiptEntry{tx: tx}
				c.entries[tx.TxID] = before
			}
			c.TrackUnsent([]pipeline.TrackedTx{tx})
			e, scheduled := c.entries[tx.TxID]
			if !scheduled {
				// The schedule no longer re-reads the database every poll: a transaction
				// the submitter stored must be scheduled here, covered blocks or not.
				t.Fatalf("transaction not scheduled")
			}
			switch {
			case tt.existing && (e != before || e.notFound):
				t.Fatalf("entry %+v replaced or changed, want the schedule's own entry as it was", e)
			case tt.wantNoted && (!e.notFound || e.notFoundAtHead != tt.scanned || e.tx.Attempts[0].Hash != tx.Attempts[0].Hash):
				t.Fatalf("entry %+v, want it scheduled as not found through block %d", e, tt.scanned)
			case !tt.wantNoted && !tt.existing && (e.notFound || e.due.After(time.Now())):
				t.Fatalf("entry %+v, want it due now for a look-up by hash", e)
			}
		})
	}
}

// The schedule is re-read only when it may be out of date; each reason alone is enough.
func TestReceiptScheduleRefreshesWhenOutOfDate(t *testing.T) {
	now := time.Now()
	const poll = time.Second
	held := []string{"0xaa/3", "0xbb/1"}
	tests := []struct {
		name        string
		refreshedAt time.Time
		refreshed   []string
		held        []string
		wanted      bool
		want        bool
	}{
		{name: "never read", held: held, want: true},
		{name: "read a poll ago, nothing changed", refreshedAt: now.Add(-poll), refreshed: held, held: held, want: false},
		{name: "read just before the backstop, nothing changed", refreshedAt: now.Add(-(refreshEveryPolls*poll - time.Millisecond)), refreshed: held, held: held, want: false},
		{name: "backstop's time", refreshedAt: now.Add(-refreshEveryPolls * poll), refreshed: held, held: held, want: true},
		{name: "a stage asked", refreshedAt: now.Add(-poll), refreshed: held, held: held, wanted: true, want: true},
		{name: "a lease gained", refreshedAt: now.Add(-poll), refreshed: held[:1], held: held, want: true},
		{name: "a lease lost", refreshedAt: now.Add(-poll), refreshed: held, held: held[1:], want: true},
		{name: "a lease taken again under a new token", refreshedAt: now.Add(-poll), refreshed: held, held: []string{"0xaa/4", "0xbb/1"}, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Schedule{cfg: ScheduleConfig{PollInterval: poll}, refreshedAt: tt.refreshedAt, refreshedLeases: tt.refreshed}
			if got := c.refreshDue(tt.held, tt.wanted, now); got != tt.want {
				t.Errorf("refreshDue = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHeldLeaseKeysNameSignerAndTokenInOrder(t *testing.T) {
	got := heldLeaseKeys([]domain.Lease{{Signer: "0xbb", Token: 1}, {Signer: "0xaa", Token: 12}})
	want := []string{"0xaa/12", "0xbb/1"}
	if !slices.Equal(got, want) {
		t.Errorf("heldLeaseKeys = %v, want %v", got, want)
	}
}

// A head below what was covered (read from a fork, or a sequencer that rolled back) makes
// nothing known absent above it any more: the entries are looked up again once the chain
// passes that head, instead of waiting for the periodic recheck.
func TestLowerHeadForgetsWhatWasCoveredAboveIt(t *testing.T) {
	above := &receiptEntry{notFound: true, notFoundAtHead: 110}
	below := &receiptEntry{notFound: true, notFoundAtHead: 100}
	c := &Schedule{entries: map[uuid.UUID]*receiptEntry{uuid.New(): above, uuid.New(): below}, scannedThrough: 110}
	if mined := c.scanBlocks(context.Background(), 108); mined != 0 {
		t.Fatalf("scanBlocks recorded %d receipts on a lower head", mined)
	}
	if c.scannedThrough != 108 || above.notFoundAtHead != 108 || below.notFoundAtHead != 100 {
		t.Fatalf("covered through %d, entries absent through %d and %d; want 108, 108 and 100", c.scannedThrough, above.notFoundAtHead, below.notFoundAtHead)
	}
}

// listingDuring answers the awaiting-receipt listing with rows, running meanwhile what
// other stages do while the query runs; the tracker's writes are not part of these tests.
type listingDuring struct {
	Store
	rows      []pipeline.TrackedTx
	meanwhile func()
}

func (s listingDuring) ListAwaitingReceipt(context.Context, []string) ([]pipeline.TrackedTx, error) {
	s.meanwhile()
	return s.rows, nil
}

// A re-read of the schedule keeps the transactions the submitter stored while its listing
// ran (they are not in the listing's snapshot) and drops only older entries the listing
// no longer shows: dropped, a new transaction was found by no block read until the next
// re-read, and then looked up by hash.
func TestRefreshKeepsTransactionsStoredWhileItListed(t *testing.T) {
	tracked := func() pipeline.TrackedTx {
		return pipeline.TrackedTx{TxID: uuid.New(), Signer: "0xaa", Attempts: []pipeline.AttemptRef{{Hash: common.BytesToHash(uuid.New().NodeID()), Kind: pipeline.AttemptOriginal}}}
	}
	listed, gone, storedMeanwhile := tracked(), tracked(), tracked()
	logger := log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a"}, nil, services.SystemClock{}, telemetry.Noop(), logger)
	var c *Schedule
	store := listingDuring{rows: []pipeline.TrackedTx{listed}, meanwhile: func() {
		time.Sleep(time.Millisecond)
		c.TrackUnsent([]pipeline.TrackedTx{storedMeanwhile})
	}}
	c = NewSchedule(ScheduleConfig{PollInterval: time.Second}, New(Config{}, store, nil, leases, telemetry.Noop(), logger), logger)
	c.scannedThrough = 40
	c.TrackUnsent([]pipeline.TrackedTx{listed, gone})
	time.Sleep(time.Millisecond)

	if err := c.refresh(t.Context(), []domain.Lease{{Signer: "0xaa", Token: 1}}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		name      string
		tx        pipeline.TrackedTx
		scheduled bool
	}{
		{"listed", listed, true},
		{"made final elsewhere (older, not listed)", gone, false},
		{"stored while the listing ran", storedMeanwhile, true},
	} {
		if _, ok := c.entries[want.tx.TxID]; ok != want.scheduled {
			t.Errorf("%s: scheduled %v, want %v", want.name, ok, want.scheduled)
		}
	}
}
