package submitting

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// resubmitRows answers the resubmit pass's reads: due rows, and when the first unmined row
// is due again.
type resubmitRows struct {
	Store
	due      int           // rows due at each read
	nextIn   time.Duration // what NextResubmitIn answers
	pending  bool
	lists    int
	nextRead int
}

func (r *resubmitRows) ListResubmitDue(_ context.Context, _ string, limit int) ([]DueResubmit, error) {
	r.lists++
	out := make([]DueResubmit, min(r.due, limit))
	for i := range out {
		out[i] = DueResubmit{TxID: uuid.New()}
	}
	return out, nil
}

func (r *resubmitRows) ClaimResubmits(context.Context, domain.Lease, []uuid.UUID, time.Duration) ([]uuid.UUID, error) {
	return nil, nil // none claimed: nothing is sent
}

func (r *resubmitRows) NextResubmitIn(context.Context, string) (time.Duration, bool, error) {
	r.nextRead++
	return r.nextIn, r.pending, nil
}

// switchingServer is a database server epoch a test can move on.
type switchingServer struct{ epoch uint64 }

func (s *switchingServer) ServerEpoch() uint64 { return s.epoch }

// A signer with nothing due is read once and then skipped until its first transaction is
// due, one resubmit interval at most; a reorg (ResubmitSoon), a new lease token or a new
// database server makes the next pass read at once, and a pass that found a full batch due
// does not skip.
func TestResubmitPassSkipsSignersWithNothingDue(t *testing.T) {
	const interval = time.Minute
	type step struct {
		after     time.Duration // since the test's start
		do        func(s *Submitter, lease *domain.Lease, server *switchingServer)
		wantLists int // list reads so far
	}
	tests := []struct {
		name  string
		rows  resubmitRows
		limit int
		steps []step
	}{
		{"first due in 10s", resubmitRows{nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1}, {after: 5 * time.Second, wantLists: 1}, {after: 9 * time.Second, wantLists: 1},
			{after: 10 * time.Second, wantLists: 2}, {after: 11 * time.Second, wantLists: 2},
		}},
		{"nothing unmined: one interval", resubmitRows{}, 8, []step{
			{after: 0, wantLists: 1}, {after: interval - time.Second, wantLists: 1}, {after: interval, wantLists: 2},
		}},
		{"first due beyond the interval: one interval", resubmitRows{nextIn: 5 * interval, pending: true}, 8, []step{
			{after: 0, wantLists: 1}, {after: interval, wantLists: 2},
		}},
		{"one due already: no skip", resubmitRows{nextIn: -time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1}, {after: time.Second, wantLists: 2},
		}},
		{"a full batch due: no skip", resubmitRows{due: 8, nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1}, {after: time.Second, wantLists: 2},
		}},
		{"some due, fewer than the limit: skip after them", resubmitRows{due: 3, nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1}, {after: time.Second, wantLists: 1},
		}},
		{"a reorg wakes it", resubmitRows{nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1},
			{after: time.Second, do: func(s *Submitter, _ *domain.Lease, _ *switchingServer) { s.ResubmitSoon() }, wantLists: 2},
			{after: 2 * time.Second, wantLists: 2},
		}},
		{"a new lease token reads again", resubmitRows{nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1},
			{after: time.Second, do: func(_ *Submitter, lease *domain.Lease, _ *switchingServer) { lease.Token++ }, wantLists: 2},
		}},
		{"a new database server reads again", resubmitRows{nextIn: 10 * time.Second, pending: true}, 8, []step{
			{after: 0, wantLists: 1},
			{after: time.Second, do: func(_ *Submitter, _ *domain.Lease, server *switchingServer) { server.epoch++ }, wantLists: 2},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _, lease := newPassSubmitter(t, 0)
			rows := tt.rows
			server := &switchingServer{epoch: 1}
			s.store, s.server, s.cfg.ResubmitInterval = &rows, server, interval
			start := time.Now()
			for _, st := range tt.steps {
				s.now = func() time.Time { return start.Add(st.after) }
				if st.do != nil {
					st.do(s, &lease, server)
				}
				if _, err := s.ResubmitDue(t.Context(), lease, tt.limit); err != nil {
					t.Fatalf("at %v: ResubmitDue: %v", st.after, err)
				}
				if rows.lists != st.wantLists {
					t.Fatalf("at %v: %d reads of due rows, want %d", st.after, rows.lists, st.wantLists)
				}
			}
		})
	}
}

// A wake between the pass's read and its record of the next due time wins: the record of
// a read the wake overtook is dropped.
func TestResubmitQuietDropsAReadAWakeOvertook(t *testing.T) {
	var q resubmitQuiet
	at := frontierEpoch{signer: "0xa", token: 1, server: 1}
	now := time.Now()
	gen := q.generation()
	q.wake()
	q.until(at, gen, now.Add(time.Minute))
	if q.quiet(at, now) {
		t.Fatal("quiet after a wake that came between the read and its record")
	}
	q.until(at, q.generation(), now.Add(time.Minute))
	if !q.quiet(at, now) || q.quiet(at, now.Add(time.Minute)) {
		t.Fatal("a current record must keep the signer quiet until its time, and no longer")
	}
}
