package submitting

import (
	"sync"
	"time"
)

// resubmitQuiet remembers, for each signer, a time before which none of its transactions
// can be due for resubmission, so the resubmit pass does not read every unmined row of the
// signer each scan only to find none due (most passes of a healthy chain: transactions are
// mined well within the resubmit interval).
//
// Why the time holds: after a read of the earliest due time, every write that schedules a
// resubmission sets now() + the resubmit interval (signing, claiming a rebroadcast, a
// replacement, a resolution, a recovered row), never earlier than what was read, except a
// reorg's revert, which makes its rows due at once and is told here (wake). Rows of the
// signer are written only under its lease, and a lost database commit shows as a new server
// epoch: either change makes the pass read again (the time is kept per frontierEpoch). The
// wait is also never longer than one resubmit interval, whatever was read.
type resubmitQuiet struct {
	mu  sync.Mutex
	gen uint64 // counts wakes: a read that a wake overtook is not trusted
	by  map[string]quietUntil
}

type quietUntil struct {
	epoch frontierEpoch
	until time.Time
}

// quiet reports whether nothing of at's signer can be due at now.
func (q *resubmitQuiet) quiet(at frontierEpoch, now time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	w, ok := q.by[at.signer]
	return ok && w.epoch == at && now.Before(w.until)
}

// generation is read before the rows are: pass it to until.
func (q *resubmitQuiet) generation() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.gen
}

// until records that nothing of at's signer is due before t, as read since generation gen.
func (q *resubmitQuiet) until(at frontierEpoch, gen uint64, t time.Time) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if gen != q.gen {
		return
	}
	if q.by == nil {
		q.by = map[string]quietUntil{}
	}
	q.by[at.signer] = quietUntil{epoch: at, until: t}
}

// wake forgets every signer's time: transactions may be due now.
func (q *resubmitQuiet) wake() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.gen++
	clear(q.by)
}
