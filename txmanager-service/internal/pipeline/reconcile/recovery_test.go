package reconcile_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// recipient is where the transactions sent outside the service go.
var recipient = common.HexToAddress("0x00000000000000000000000000000000000000e1")

// A chain ahead of the database quarantines the signer, the unknown nonces as its range,
// and allocates nothing above them; nothing else does (docs/design.md#quarantine).
func TestCheckChainAheadQuarantinesTheUnknownNonces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// allocated: the service allocated and sent nonces 0 and 1 (the cursor stands at 2);
		// otherwise the database has never allocated for the signer.
		allocated bool
		// outside: transactions at the next nonces the database does not know.
		outside int
		adopt   bool
		want    *reconcile.NonceRange
	}{
		{name: "the chain at the cursor: nothing unknown", allocated: true},
		{name: "the chain ahead of the cursor: the unknown nonces quarantined", allocated: true, outside: 3, want: &reconcile.NonceRange{From: 2, To: 5}},
		{name: "unknown chain nonces adopted (a key used elsewhere): never quarantined", allocated: true, outside: 3, adopt: true},
		{name: "a signer the database has no cursor for: a first use, not a loss", outside: 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			r := s.reconciler(reconcile.Config{AdoptUnknownChainNonces: tc.adopt}, services.SystemClock{})
			next := uint64(0)
			if tc.allocated {
				s.allocate(2)
				s.submit()
				next = 2
			}
			for i := range tc.outside {
				s.sendOutside(next+uint64(i), recipient, 1, params.GWei)
			}
			s.waitPending(next + uint64(tc.outside))

			check, err := r.CheckChainAhead(ctx(t), s.lease)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := s.store.SignerChainCheck(ctx(t), s.lease.Signer)
			if err != nil {
				t.Fatal(err)
			}
			for _, got := range []*reconcile.Recovery{check.Quarantine, stored.Quarantine} {
				switch {
				case tc.want == nil && got != nil:
					t.Fatalf("quarantined %+v, want no quarantine", got.NonceRange)
				case tc.want != nil && (got == nil || got.NonceRange != *tc.want || got.RecordedTo != tc.want.From):
					t.Fatalf("quarantine %+v, want nonces %+v with nothing recorded yet", got, *tc.want)
				}
			}
			if tc.allocated && stored.NextNonce != 2 {
				t.Fatalf("cursor %d after the check, want it left at 2: nothing is allocated above unknown nonces", stored.NextNonce)
			}
		})
	}
}

// A live quarantine is kept as it was found: a chain that moves further meanwhile does not
// widen the range a recovery is already recording.
func TestCheckChainAheadKeepsALiveQuarantine(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	r := s.reconciler(reconcile.Config{}, services.SystemClock{})
	s.allocate(1)
	s.submit()
	s.sendOutside(1, recipient, 1, params.GWei)
	s.waitPending(2)
	first, err := r.CheckChainAhead(ctx(t), s.lease)
	if err != nil || first.Quarantine == nil {
		t.Fatalf("first check: %+v, %v; want a quarantine", first, err)
	}
	s.sendOutside(2, recipient, 2, params.GWei)
	s.waitPending(3)
	again, err := r.CheckChainAhead(ctx(t), s.lease)
	if err != nil || again.Quarantine == nil || again.Quarantine.NonceRange != (reconcile.NonceRange{From: 1, To: 2}) {
		t.Fatalf("second check: %+v, %v; want the live quarantine of nonce 1 alone", again.Quarantine, err)
	}
}

// Recovery records, as rows of their own, the transactions the chain holds at the nonces
// the database lost, wherever they are (just after the last transaction on record, many
// blocks later, with nothing on record to start from, or only in the node's pool), and
// releases the signer once every unknown nonce has its row: by itself in adopt-by-intent
// mode, at an operator's request in hold mode or when the chain no longer shows some of
// them (docs/design.md#recovery-after-a-database-loss).
func TestRecoverFromChainRecordsWhatTheDatabaseLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// anchored: the service sent nonces 0 and 1 itself, so they are on record with their
		// hashes (where a scan may start); otherwise it only allocated them and the chain holds
		// other transactions there, of which the database has no attempt.
		anchored bool
		// emptyBlocks are sealed between nonce 1's block and the lost transactions' (one
		// recovery step reads at most 256 blocks from its start: 256 puts them beyond it).
		emptyBlocks int
		// mined lost transactions from nonce 2 on are sealed in one block; pending ones after
		// them stay in the node's pool.
		mined, pending int
		// dropPending empties the pool once the quarantine is recorded: the chain no longer
		// shows those nonces.
		dropPending bool
		// hold: recovery.mode hold, where only an operator's release lets the signer serve.
		hold bool
		// wantRecorded: lost transactions the first pass records; wantHeld: the signer is
		// still quarantined after it, until an operator asks for its release.
		wantRecorded int
		wantHeld     bool
		// wantMissing: the release note says how many nonces were let go unrecorded.
		wantMissing string
	}{
		{name: "mined right after the last transaction on record", anchored: true, mined: 3, wantRecorded: 3},
		{name: "mined more blocks after the last transaction on record than one step reads", anchored: true, emptyBlocks: 256, mined: 3, wantRecorded: 3},
		{name: "nothing on record below them: the start is found by the signer's nonce at each block", emptyBlocks: 20, mined: 2, wantRecorded: 2},
		{name: "some only in the node's pool", anchored: true, mined: 1, pending: 2, wantRecorded: 3},
		{name: "hold mode: recorded, then released at an operator's request", anchored: true, mined: 2, hold: true, wantRecorded: 2, wantHeld: true},
		{name: "a nonce the chain no longer shows: held until an operator lets it go", anchored: true, mined: 1, pending: 1, dropPending: true,
			wantRecorded: 1, wantHeld: true, wantMissing: "1 nonces from 3 on were not found on chain"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			r := s.reconciler(reconcile.Config{RecoverByIntent: !tc.hold, AdoptionWindow: time.Hour, ResubmitInterval: time.Minute, Confirmations: 2},
				services.SystemClock{})
			s.allocate(2)
			if tc.anchored {
				s.submit()
			} else {
				s.sendOutside(0, recipient, 1, params.GWei)
				s.sendOutside(1, recipient, 1, params.GWei)
			}
			s.waitPending(2)
			s.mine(1 + tc.emptyBlocks)
			var lost []common.Hash
			for i := range tc.mined + tc.pending {
				if i == tc.mined {
					s.waitPending(2 + uint64(tc.mined))
					s.mine(1)
				}
				lost = append(lost, s.sendOutside(2+uint64(i), recipient, 100+int64(i), params.GWei))
			}
			chainNonce := 2 + uint64(tc.mined+tc.pending)
			s.waitPending(chainNonce)
			if tc.pending == 0 {
				s.mine(1)
			}
			if tc.dropPending {
				if check, err := r.CheckChainAhead(ctx(t), s.lease); err != nil || check.Quarantine == nil {
					t.Fatalf("quarantine: %+v, %v", check, err)
				}
				s.sim.Backend().Rollback()
				s.waitPending(2 + uint64(tc.mined))
			}

			out, err := r.Pass(ctx(t), s.lease)
			if err != nil {
				t.Fatalf("pass: %v", err)
			}
			if out.Recorded != tc.wantRecorded || !out.Quarantined {
				t.Fatalf("pass recorded %d (quarantined %v), want %d recorded for a quarantined signer", out.Recorded, out.Quarantined, tc.wantRecorded)
			}
			var recordedHashes []common.Hash
			for _, row := range s.rows() {
				if !row.recovered {
					continue
				}
				if row.state != string(domain.StateTracking) || row.subState != "RECOVERED" || !row.unclaimed || row.to != recipient.Hex() {
					t.Errorf("recovered row %+v, want TRACKING/RECOVERED, unclaimed, with the chain's recipient", row)
				}
				recordedHashes = append(recordedHashes, common.HexToHash(row.hash))
			}
			if !slices.Equal(recordedHashes, lost[:tc.wantRecorded]) {
				t.Fatalf("recorded %v, want the chain's transactions %v, in nonce order", recordedHashes, lost[:tc.wantRecorded])
			}
			if q := s.quarantine(); q.Quarantined != tc.wantHeld {
				t.Fatalf("after the pass quarantined = %v (%+v), want %v", q.Quarantined, q, tc.wantHeld)
			}
			releasedBy := "recovery (adopt-by-intent)"
			if tc.wantHeld {
				if c := s.cursor(); c != 2 {
					t.Fatalf("cursor %d while quarantined, want 2", c)
				}
				if _, err := s.admin.RequestRelease(ctx(t), s.lease.Signer, "operator-1", "looked at them"); err != nil {
					t.Fatal(err)
				}
				if out, err := r.Pass(ctx(t), s.lease); err != nil || out.Recorded != 0 {
					t.Fatalf("pass after the release request: %+v, %v; want nothing more recorded", out, err)
				}
				releasedBy = "operator-1"
			}
			q := s.quarantine()
			if q.Quarantined || q.ReleasedBy != releasedBy || q.Recorded != int64(tc.wantRecorded) {
				t.Fatalf("quarantine %+v, want released by %q with %d recorded", q, releasedBy, tc.wantRecorded)
			}
			if !strings.Contains(q.ReleaseNote, tc.wantMissing) {
				t.Fatalf("release note %q, want it to say %q", q.ReleaseNote, tc.wantMissing)
			}
			if c := s.cursor(); c != int64(chainNonce) {
				t.Fatalf("cursor %d after the release, want past the chain's nonce, %d", c, chainNonce)
			}
		})
	}
}

// A node whose lease was lost (another may own the signer now) records nothing, and drops
// the lease the moment its write is refused.
func TestRecoveryIsFencedWhenTheLeaseIsLost(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	r := s.reconciler(reconcile.Config{RecoverByIntent: true, AdoptionWindow: time.Hour}, services.SystemClock{})
	s.allocate(1)
	s.submit()
	s.sendOutside(1, recipient, 1, params.GWei)
	s.waitPending(2)
	s.mine(1)
	if check, err := r.CheckChainAhead(ctx(t), s.lease); err != nil || check.Quarantine == nil {
		t.Fatalf("quarantine: %+v, %v", check, err)
	}
	if err := repositories.NewLeaseRepository(s.pool, chainID).Release(ctx(t), s.lease); err != nil {
		t.Fatal(err)
	}

	_, err := r.Pass(ctx(t), s.lease)
	var fenced *domain.FencedError
	if !errors.As(err, &fenced) {
		t.Fatalf("pass with a lost lease: %v, want a fenced write", err)
	}
	if _, held := s.node.Leases.Current(s.lease.Signer); held {
		t.Fatal("the node still trusts the lease after a fenced write")
	}
	for _, row := range s.rows() {
		if row.recovered {
			t.Fatalf("row %+v recorded without the lease", row)
		}
	}
	if q := s.quarantine(); !q.Quarantined || q.RecordedTo != 1 {
		t.Fatalf("quarantine %+v, want it live with nothing recorded", q)
	}
}
