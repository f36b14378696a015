package reconcile

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// A scan below the window goes on where it stopped while it looks for every nonce asked
// for (a settled row only leaves the set); a nonce it does not look for starts it again at
// the window, since the blocks it already passed were not read for that nonce.
func TestBelowWindowScanGoesOnOnlyForTheNoncesItLooksFor(t *testing.T) {
	t.Parallel()
	signer, other := common.Address{1}, common.Address{2}
	tests := []struct {
		name      string
		signer    common.Address
		nonces    []uint64
		wantFloor uint64
		wantFound int
	}{
		{name: "the same nonces: where it stopped", signer: signer, nonces: []uint64{3, 7}, wantFloor: 500, wantFound: 1},
		{name: "one of them settled: where it stopped", signer: signer, nonces: []uint64{7}, wantFloor: 500, wantFound: 1},
		{name: "a nonce it does not look for: again at the window", signer: signer, nonces: []uint64{2, 7}, wantFloor: 900},
		{name: "another signer: a scan of its own", signer: other, nonces: []uint64{3, 7}, wantFloor: 900},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			scans := &belowWindowScans{bySigner: map[common.Address]*belowWindowScan{}}
			started := scans.scanFor(signer, []uint64{7, 3}, 900)
			started.floor, started.found[3] = 500, services.SentTx{Nonce: 3}
			got := scans.scanFor(tc.signer, tc.nonces, 900)
			if got.floor != tc.wantFloor || len(got.found) != tc.wantFound {
				t.Fatalf("scan for %v: floor %d with %d found, want %d with %d", tc.nonces, got.floor, len(got.found), tc.wantFloor, tc.wantFound)
			}
			scans.forget(tc.signer)
			if again := scans.scanFor(tc.signer, tc.nonces, 900); again.floor != 900 || len(again.found) != 0 {
				t.Fatalf("after forget: floor %d with %d found, want a new scan at the window", again.floor, len(again.found))
			}
		})
	}
}
