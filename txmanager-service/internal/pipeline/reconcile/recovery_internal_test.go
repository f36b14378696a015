package reconcile

import (
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// What the chain holds at the lost nonces becomes rows whose intent is what the chain ran
// and whose attempt is the chain's signed bytes; nonces the scan did not show are listed.
func TestRecoveredRows(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	now := time.Unix(5000, 0)
	found := map[uint64]services.SentTx{
		10: {Hash: common.Hash{1}, Nonce: 10, To: &to, Value: big.NewInt(7), Data: []byte{1}, Gas: 60000, MaxFee: big.NewInt(9), MaxTip: big.NewInt(2), Raw: []byte("raw10"), BlockNumber: 44},
		12: {Hash: common.Hash{2}, Nonce: 12, Gas: 90000, Data: []byte{0x60}, Raw: []byte("raw12")}, // a contract creation, no value
	}
	rows, missing := recoveredRows(signer, signer.Hex(), []uint64{10, 11, 12, 13}, found, now)
	if !slices.Equal(missing, []uint64{11, 13}) {
		t.Errorf("missing %v, want [11 13]", missing)
	}
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	first := rows[0]
	if first.Tx.Nonce != 10 || *first.Tx.Intent.To != to || first.Tx.Intent.Value.Int64() != 7 || first.Tx.EffectiveGasLimit != 60000 ||
		first.Tx.State != domain.StateTracking || *first.Tx.TxHash != (common.Hash{1}) || first.Tx.RecoveredAt == nil || !first.Tx.RecoveredAt.Equal(now) {
		t.Errorf("row %+v", first.Tx)
	}
	if a := first.Attempt; a.TxID != first.Tx.ID || a.Hash != (common.Hash{1}) || a.Kind != pipeline.AttemptOriginal || string(a.Raw) != "raw10" || a.MaxFee.Int64() != 9 {
		t.Errorf("attempt %+v", a)
	}
	creation := rows[1].Tx
	if creation.Intent.To != nil || creation.Intent.Value.Sign() != 0 || rows[1].Attempt.MaxFee.Sign() != 0 {
		t.Errorf("contract creation row %+v", creation)
	}
	// A retry of the same intent (any gas left to estimation) has the row's recovery key.
	retry := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(7), Data: []byte{1}}}
	if retry.RecoveryKey() != (domain.CreateRequest{Signer: signer, Intent: first.Tx.Intent}).RecoveryKey() {
		t.Error("a retry of the intent does not have the recovered row's key")
	}
}
