package reconcile

import (
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// A scan for taken nonces goes on where it stopped while it looks for every nonce asked for
// under the same lease (a settled row only leaves the set). A nonce it does not look for
// starts it again from the head, keeping what it found, since the blocks it passed were not
// read for that nonce; a lease won again starts it afresh, as does a scan left idle.
func TestBelowWindowScanGoesOnOnlyForTheNoncesItLooksFor(t *testing.T) {
	t.Parallel()
	signer, other := common.Address{1}, common.Address{2}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name      string
		signer    common.Address
		token     uint64
		nonces    []uint64
		after     time.Duration
		wantFloor uint64
		wantFound int
	}{
		{name: "the same nonces: where it stopped", signer: signer, token: 1, nonces: []uint64{3, 7}, wantFloor: 500, wantFound: 1},
		{name: "one of them settled: where it stopped", signer: signer, token: 1, nonces: []uint64{3}, wantFloor: 500, wantFound: 1},
		{name: "a nonce it does not look for: again from the head, with what it found", signer: signer, token: 1, nonces: []uint64{2, 3}, wantFloor: 901, wantFound: 1},
		{name: "the lease won again: afresh", signer: signer, token: 2, nonces: []uint64{3, 7}, wantFloor: 901},
		{name: "left idle past its life: afresh", signer: signer, token: 1, nonces: []uint64{3, 7}, after: 2 * idleScanLife, wantFloor: 901},
		{name: "another signer: a scan of its own", signer: other, token: 1, nonces: []uint64{3, 7}, wantFloor: 901},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scans := &belowWindowScans{bySigner: map[common.Address]*belowWindowScan{}}
			started := scans.scanFor(signer, 1, []uint64{7, 3}, 900, start)
			started.floor, started.found[3] = 500, services.SentTx{Nonce: 3, Hash: common.Hash{3}}
			got := scans.scanFor(tc.signer, tc.token, tc.nonces, 900, start.Add(tc.after))
			if got.floor != tc.wantFloor || len(got.found) != tc.wantFound {
				t.Fatalf("scan for %v: floor %d with %d found, want %d with %d", tc.nonces, got.floor, len(got.found), tc.wantFloor, tc.wantFound)
			}
		})
	}
}

// A finding the chain no longer holds starts the signer's scan again; one the scan did not
// make (the window's own) leaves it going on.
func TestBelowWindowScanForgetsOnlyItsOwnStaleFinding(t *testing.T) {
	t.Parallel()
	signer := common.Address{1}
	now := time.Now()
	scans := &belowWindowScans{bySigner: map[common.Address]*belowWindowScan{}}
	scan := scans.scanFor(signer, 1, []uint64{3}, 900, now)
	scan.floor, scan.found[3] = 500, services.SentTx{Nonce: 3, Hash: common.Hash{3}}
	scans.forgetFinding(signer, 3, common.Hash{4})
	if again := scans.scanFor(signer, 1, []uint64{3}, 900, now); again.floor != 500 {
		t.Fatalf("after a stale finding of the window's: floor %d, want the scan going on at 500", again.floor)
	}
	scans.forgetFinding(signer, 3, common.Hash{3})
	if again := scans.scanFor(signer, 1, []uint64{3}, 900, now); again.floor != 901 || len(again.found) != 0 {
		t.Fatalf("after its own stale finding: floor %d with %d found, want a new scan from the head", again.floor, len(again.found))
	}
}
