package reconcile

import (
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestFindHole(t *testing.T) {
	tests := []struct {
		name       string
		pending    uint64
		lowestOpen int64
		want       NonceHole
		wantHole   bool
	}{
		{"nothing open", 5, -1, NonceHole{}, false},
		{"pending covers the open nonce", 7, 7, NonceHole{}, false},
		{"pending beyond (ours in the pool)", 12, 7, NonceHole{}, false},
		{"one missing nonce", 6, 7, NonceHole{From: 6, To: 7}, true},
		{"a run of missing nonces", 3, 7, NonceHole{From: 3, To: 7}, true},
		{"a long run is filled in parts", 0, 1000, NonceHole{From: 0, To: maxHoleFill}, true},
	}
	for _, tc := range tests {
		got, ok := findHole(tc.pending, tc.lowestOpen)
		if ok != tc.wantHole || got != tc.want {
			t.Errorf("%s: findHole(%d, %d) = %v %v, want %v %v", tc.name, tc.pending, tc.lowestOpen, got, ok, tc.want, tc.wantHole)
		}
	}
}

// Only a hole that stays the same for the grace period counts; one that moves or closes
// starts over.
func TestHoleTrackerAges(t *testing.T) {
	tr := &holeTracker{seen: map[string]seenHole{}}
	t0 := time.Unix(1000, 0)
	h := NonceHole{From: 3, To: 5}
	if age := tr.observe("a", h, true, t0); age != 0 {
		t.Fatalf("first sight aged %s", age)
	}
	if age := tr.observe("a", h, true, t0.Add(10*time.Second)); age != 10*time.Second {
		t.Fatalf("same hole aged %s, want 10s", age)
	}
	if age := tr.observe("a", NonceHole{From: 4, To: 5}, true, t0.Add(20*time.Second)); age != 0 {
		t.Fatalf("a changed hole aged %s, want a fresh start", age)
	}
	tr.observe("a", NonceHole{}, false, t0.Add(21*time.Second))
	if age := tr.observe("a", h, true, t0.Add(22*time.Second)); age != 0 {
		t.Fatalf("a hole seen again after closing aged %s", age)
	}
}

// A placeholder is a zero-value self-transfer at the nonce, allocated and ready to sign.
func TestPlaceholderTx(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	tx := placeholderTx(signer, signer.Hex(), 12, 21_000, time.Unix(50, 0))
	if tx.Nonce != 12 || *tx.Intent.To != signer || tx.Intent.Value.Sign() != 0 || tx.EffectiveGasLimit != services.PlainTransferGas ||
		tx.State != domain.StateAllocated || tx.Fingerprint == ([32]byte{}) {
		t.Errorf("placeholder %+v", tx)
	}
	if other := placeholderTx(signer, signer.Hex(), 12, 21_000, time.Unix(50, 0)); other.ID == tx.ID {
		t.Error("two placeholders share an id")
	}
}
