package submitting

import (
	"testing"
	"time"
)

// A pass reads from the nonce above what the signer has signed, and from 0 (every open
// row) before anything is known, in a new lease epoch, on a new database server, after
// Rescan, and every rescanEvery.
func TestUnsignedFrontier(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := frontierEpoch{signer: "0xa", token: 7, server: 1}
	newLease := frontierEpoch{signer: "0xa", token: 8, server: 1}
	oldLease := frontierEpoch{signer: "0xa", token: 6, server: 1}
	newServer := frontierEpoch{signer: "0xa", token: 7, server: 2}
	other := frontierEpoch{signer: "0xb", token: 1, server: 1}
	rows := func(nonces ...uint64) []AllocatedTx {
		out := make([]AllocatedTx, len(nonces))
		for i, n := range nonces {
			out[i].Nonce = n
		}
		return out
	}
	type step struct {
		do       func(f *unsignedFrontiers)
		after    time.Duration
		at       frontierEpoch
		wantFrom uint64
		wantFull bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"nothing known", []step{{at: at, wantFrom: 0, wantFull: true}}},
		{"a scan that found rows starts from the lowest, signing moves past it", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(at, t0, rows(3, 4, 9), 20) }, after: time.Second, at: at, wantFrom: 3},
			{do: func(f *unsignedFrontiers) { f.signedThrough(at, 4) }, after: time.Second, at: at, wantFrom: 5},
			{do: func(f *unsignedFrontiers) { f.signedThrough(at, 2) }, after: time.Second, at: at, wantFrom: 5},
		}},
		{"a scan that found nothing starts from the cursor read before it", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, after: time.Second, at: at, wantFrom: 20},
		}},
		{"every rescanEvery the pass reads every open row", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, after: rescanEvery, at: at, wantFrom: 0, wantFull: true},
		}},
		{"another lease epoch knows nothing, and signing in the old one changes nothing", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, after: time.Second, at: newLease, wantFull: true},
			{do: func(f *unsignedFrontiers) { f.signedThrough(oldLease, 30) }, after: time.Second, at: at, wantFrom: 20},
		}},
		{"a new database server knows nothing", []step{
			{do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, after: time.Second, at: newServer, wantFull: true},
			{do: func(f *unsignedFrontiers) { f.signedThrough(newServer, 30) }, after: time.Second, at: at, wantFrom: 20},
		}},
		{"rescan forgets the signer, not others", []step{
			{do: func(f *unsignedFrontiers) {
				f.scanned(at, t0, nil, 20)
				f.scanned(other, t0, nil, 5)
				f.rescan("0xa")
			}, after: time.Second, at: at, wantFull: true},
			{after: time.Second, at: other, wantFrom: 5},
		}},
		{"signing before any scan records nothing", []step{
			{do: func(f *unsignedFrontiers) { f.signedThrough(at, 9) }, after: time.Second, at: at, wantFull: true},
		}},
	}
	for _, tt := range tests {
		var f unsignedFrontiers
		for i, s := range tt.steps {
			if s.do != nil {
				s.do(&f)
			}
			from, full := f.from(s.at, t0.Add(s.after))
			if from != s.wantFrom || full != s.wantFull {
				t.Errorf("%s, step %d: from %d (full %v), want %d (full %v)", tt.name, i, from, full, s.wantFrom, s.wantFull)
			}
		}
	}
}

// A pass has nothing to read once the signer's rows are signed up to the cursor read before
// the last scan and up to every allocation this node announced in the lease epoch since;
// otherwise (nothing known, another epoch, a scan due, an allocation not signed yet) it reads.
func TestAllSignedOnlyWhenEveryAllocationIsSigned(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := frontierEpoch{signer: "0xa", token: 7, server: 1}
	newLease := frontierEpoch{signer: "0xa", token: 8, server: 1}
	newServer := frontierEpoch{signer: "0xa", token: 7, server: 2}
	found := []AllocatedTx{{Nonce: 18}, {Nonce: 19}}
	tests := []struct {
		name  string
		do    func(f *unsignedFrontiers)
		at    frontierEpoch
		after time.Duration
		want  bool
	}{
		{name: "nothing known", do: func(*unsignedFrontiers) {}, at: at, want: false},
		{name: "a scan found nothing below the cursor, nothing allocated since", do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, at: at, want: true},
		{name: "a scan found rows not signed yet", do: func(f *unsignedFrontiers) { f.scanned(at, t0, found, 20) }, at: at, want: false},
		{name: "the rows the scan found are signed", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, found, 20)
			f.signedThrough(at, 19)
		}, at: at, want: true},
		{name: "an allocation announced after the scan", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, nil, 20)
			f.allocated("0xa", 7, 25)
		}, at: at, want: false},
		{name: "an allocation announced after the scan, signed", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, nil, 20)
			f.allocated("0xa", 7, 25)
			f.signedThrough(at, 24)
		}, at: at, want: true},
		{name: "an allocation announced while the scan ran, before it recorded", do: func(f *unsignedFrontiers) {
			f.allocated("0xa", 7, 25)
			f.scanned(at, t0, nil, 20)
		}, at: at, want: false},
		{name: "a late notice from an older lease epoch hides nothing", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, nil, 20)
			f.allocated("0xa", 7, 25)
			f.allocated("0xa", 6, 21)
		}, at: at, want: false},
		{name: "another signer's allocation", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, nil, 20)
			f.allocated("0xb", 7, 25)
		}, at: at, want: true},
		{name: "a scan from nonce 0 is due", do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, at: at, after: rescanEvery, want: false},
		{name: "another lease epoch", do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, at: newLease, want: false},
		{name: "a new database server", do: func(f *unsignedFrontiers) { f.scanned(at, t0, nil, 20) }, at: newServer, want: false},
		{name: "after Rescan", do: func(f *unsignedFrontiers) {
			f.scanned(at, t0, nil, 20)
			f.rescan("0xa")
		}, at: at, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var f unsignedFrontiers
			tt.do(&f)
			if got := f.allSigned(tt.at, t0.Add(time.Second+tt.after)); got != tt.want {
				t.Fatalf("allSigned = %v, want %v", got, tt.want)
			}
		})
	}
}
