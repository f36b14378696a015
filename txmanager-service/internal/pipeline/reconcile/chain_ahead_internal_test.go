package reconcile

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestJudgeTakenNonce(t *testing.T) {
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	other := common.HexToAddress("0x00000000000000000000000000000000000000cc")
	row := domain.ManagedTx{Nonce: 5, Intent: domain.Intent{To: &to, Value: big.NewInt(3), Data: []byte{1}}}
	sent := func(to common.Address, value int64, data []byte, block uint64) services.SentTx {
		return services.SentTx{To: &to, Value: big.NewInt(value), Data: data, BlockNumber: block}
	}
	tests := []struct {
		name  string
		sent  services.SentTx
		found bool
		head  uint64
		want  takenNonceVerdict
	}{
		{"nothing found yet", services.SentTx{}, false, 100, verdictWait},
		{"our intent, pending", sent(to, 3, []byte{1}, 0), true, 100, verdictOurs},
		{"our intent, mined", sent(to, 3, []byte{1}, 90), true, 100, verdictOurs},
		{"another recipient, confirmed", sent(other, 3, []byte{1}, 70), true, 100, verdictForeign},
		{"another value, confirmed", sent(to, 4, []byte{1}, 81), true, 100, verdictForeign},
		{"other data, one block short of confirmed", sent(to, 3, []byte{2}, 82), true, 100, verdictWait},
		{"another intent, pending", sent(other, 3, nil, 0), true, 100, verdictWait},
	}
	for _, tc := range tests {
		if got := judgeTakenNonce(row, tc.sent, tc.found, tc.head, 20); got != tc.want {
			t.Errorf("%s: verdict %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestSameIntent(t *testing.T) {
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	tests := []struct {
		name   string
		intent domain.Intent
		sent   services.SentTx
		want   bool
	}{
		{"equal", domain.Intent{To: &to, Value: big.NewInt(1), Data: []byte{9}}, services.SentTx{To: &to, Value: big.NewInt(1), Data: []byte{9}}, true},
		{"nil value is zero", domain.Intent{To: &to}, services.SentTx{To: &to, Value: new(big.Int)}, true},
		{"creation against a call", domain.Intent{}, services.SentTx{To: &to}, false},
		{"both creations", domain.Intent{Data: []byte{1}}, services.SentTx{Data: []byte{1}}, true},
		{"data differs", domain.Intent{To: &to, Data: []byte{1}}, services.SentTx{To: &to, Data: []byte{2}}, false},
	}
	for _, tc := range tests {
		if got := sameIntent(tc.intent, tc.sent); got != tc.want {
			t.Errorf("%s: sameIntent = %v, want %v", tc.name, got, tc.want)
		}
	}
}
