package writer

import (
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Retried creates adopt recovered transactions of equal intent, each at most once, the
// lowest nonce first; a named gas limit must match, an unnamed one matches any.
func TestAdoptionPoolHandsEachTransactionOnce(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	recovered := func(nonce uint64, value int64, gas uint64) domain.ManagedTx {
		return domain.ManagedTx{ID: uuid.New(), Signer: signer, Nonce: nonce, EffectiveGasLimit: gas,
			Intent: domain.Intent{To: &to, Value: big.NewInt(value), GasLimit: gas}}
	}
	key := func(value int64) [32]byte {
		return domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(value)}}.RecoveryKey()
	}
	pool := newAdoptionPool([]domain.ManagedTx{recovered(3, 7, 21000), recovered(4, 7, 50000), recovered(5, 7, 21000), recovered(6, 2, 21000)})
	steps := []struct {
		name      string
		value     int64
		gas       uint64
		wantNonce int64 // -1: nothing to adopt
	}{
		{"lowest nonce first", 7, 0, 3},
		{"a named gas limit picks its match", 7, 21000, 5},
		{"another gas limit", 7, 50000, 4},
		{"all three taken", 7, 0, -1},
		{"another intent", 2, 0, 6},
		{"an intent never lost", 9, 0, -1},
	}
	for _, s := range steps {
		got := int64(-1)
		if tx, ok := pool.take(key(s.value), s.gas); ok {
			got = int64(tx.Nonce)
		}
		if got != s.wantNonce {
			t.Errorf("%s: adopted nonce %d, want %d (-1: none)", s.name, got, s.wantNonce)
		}
	}
	var none *adoptionPool
	if _, ok := none.take(key(7), 0); ok {
		t.Error("a batch without recovered transactions adopted one")
	}
}
