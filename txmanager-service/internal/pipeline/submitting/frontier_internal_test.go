package submitting

import (
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A pass reads from the nonce above what the signer has signed, and from 0 (every open
// row) before anything is known, in a new lease epoch, after Rescan, and every rescanEvery.
func TestUnsignedFrontier(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	lease := domain.Lease{Signer: "0xa", Token: 7}
	rows := func(nonces ...uint64) []domain.ManagedTx {
		out := make([]domain.ManagedTx, len(nonces))
		for i, n := range nonces {
			out[i].Nonce = n
		}
		return out
	}
	type step struct {
		do       func(f *unsignedFrontiers)
		at       time.Duration
		lease    domain.Lease
		wantFrom uint64
		wantFull bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing known", []step{{at: 0, lease: lease, wantFrom: 0, wantFull: true}}},
		{"a scan that found rows starts from the lowest, signing moves past it", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(lease, t0, rows(3, 4, 9), 20) }, at: time.Second, lease: lease, wantFrom: 3},
			{do: func(f *unsignedFrontiers) { f.signedThrough(lease, 4) }, at: time.Second, lease: lease, wantFrom: 5},
			{do: func(f *unsignedFrontiers) { f.signedThrough(lease, 2) }, at: time.Second, lease: lease, wantFrom: 5},
		}},
		{"a scan that found nothing starts from the cursor read before it", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(lease, t0, nil, 20) }, at: time.Second, lease: lease, wantFrom: 20},
		}},
		{"every rescanEvery the pass reads every open row", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(lease, t0, nil, 20) }, at: rescanEvery, lease: lease, wantFrom: 0, wantFull: true},
		}},
		{"another lease epoch knows nothing, and signing in the old one changes nothing", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(lease, t0, nil, 20) }, at: time.Second, lease: domain.Lease{Signer: "0xa", Token: 8}, wantFull: true},
			{do: func(f *unsignedFrontiers) { f.signedThrough(domain.Lease{Signer: "0xa", Token: 6}, 30) }, at: time.Second, lease: lease, wantFrom: 20},
		}},
		{"rescan forgets the signer, not others", []step{
			{do: func(f *unsignedFrontiers) {
				f.scanned(lease, t0, nil, 20)
				f.scanned(domain.Lease{Signer: "0xb", Token: 1}, t0, nil, 5)
				f.rescan("0xa")
			}, at: time.Second, lease: lease, wantFull: true},
			{at: time.Second, lease: domain.Lease{Signer: "0xb", Token: 1}, wantFrom: 5},
		}},
		{"signing before any scan records nothing", []step{
			{do: func(f *unsignedFrontiers) { f.signedThrough(lease, 9) }, at: time.Second, lease: lease, wantFull: true},
		}},
	}
	for _, tt := range tests {
		var f unsignedFrontiers
		for i, s := range tt.steps {
			if s.do != nil {
				s.do(&f)
			}
			from, full := f.from(s.lease, t0.Add(s.at))
			if from != s.wantFrom || full != s.wantFull {
				t.Errorf("%s, step %d: from %d (full %v), want %d (full %v)", tt.name, i, from, full, s.wantFrom, s.wantFull)
			}
		}
	}
}
