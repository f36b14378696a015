package submitting

import (
	"context"
	"errors"
	"io"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// estimates is a chain whose only answer is a gas estimate.
type estimates struct {
	Chain
	gas uint64
	err error
}

func (e estimates) EstimateGas(context.Context, services.CallRequest) (uint64, error) {
	return e.gas, e.err
}

// Only the intent's own attempts refused short of the L1 part, with a limit the service
// estimated and admitted under a fee cap, are estimated again, and only to a larger limit.
func TestWhichTransactionsAreEstimatedAgain(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chainID := services.ChainID{Int: big.NewInt(1337)}
	signer := pipeline.NewSigner(chainID, signerFunc(func(tx *types.Transaction) (*types.Transaction, error) {
		return types.SignTx(tx, types.LatestSignerForChainID(chainID.Int), key)
	}))
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	signed, err := signer.Sign(t.Context(), uuid.New(), pipeline.AttemptOriginal, pipeline.Unsigned{From: crypto.PubkeyToAddress(key.PublicKey), To: &to,
		Value: big.NewInt(1), Gas: 27_600, MaxFee: big.NewInt(10), MaxTip: big.NewInt(1)})
	if err != nil {
		t.Fatal(err)
	}
	short := DueResubmit{TxID: uuid.New(), Raw: signed.Raw, Kind: pipeline.AttemptOriginal, SubState: domain.SubStateL1GasShort, AdmittedGasLimit: 27_600}
	capped := services.FeePolicy{MaxFeeCap: big.NewInt(100)}
	tests := []struct {
		name string
		due  func(DueResubmit) DueResubmit
		// uncapped: the service has no fee cap (fees.maxFeePerGas "").
		uncapped bool
		estimate estimates
		want     uint64 // 0: it keeps its limit
	}{
		{name: "short of the L1 part, estimated by the service: the padded estimate now", estimate: estimates{gas: 30_000}, want: 36_000},
		{name: "a replacement of it too", due: func(d DueResubmit) DueResubmit { d.Kind = pipeline.AttemptReplace; return d }, estimate: estimates{gas: 30_000}, want: 36_000},
		{name: "another answer", due: func(d DueResubmit) DueResubmit { d.SubState = domain.SubStatePoolFull; return d }, estimate: estimates{gas: 30_000}},
		{name: "a limit the client named", due: func(d DueResubmit) DueResubmit { d.IntentGasLimit = 27_600; return d }, estimate: estimates{gas: 30_000}},
		{name: "a cancellation", due: func(d DueResubmit) DueResubmit { d.Kind = pipeline.AttemptCancel; return d }, estimate: estimates{gas: 30_000}},
		{name: "no admitted limit on record", due: func(d DueResubmit) DueResubmit { d.AdmittedGasLimit = 0; return d }, estimate: estimates{gas: 30_000}},
		{name: "no fee cap bounds it", uncapped: true, estimate: estimates{gas: 30_000}},
		{name: "the client's own fee cap bounds it", due: func(d DueResubmit) DueResubmit { d.IntentMaxFee = big.NewInt(50); return d },
			uncapped: true, estimate: estimates{gas: 30_000}, want: 36_000},
		{name: "the estimate now is no larger", estimate: estimates{gas: 23_000}},
		{name: "the node gives no estimate", estimate: estimates{err: errors.New("execution timeout")}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fees := capped
			if tc.uncapped {
				fees = services.FeePolicy{}
			}
			s := &Submitter{cfg: Config{Fees: fees, GasEstimateMultiplier: 1.2, MaxGasLimit: 30_000_000}, chain: tc.estimate,
				log: log.NewHelper(log.NewStdLogger(io.Discard))}
			due := short
			if tc.due != nil {
				due = tc.due(short)
			}
			got, raised := s.raisedGasLimit(t.Context(), domain.Lease{Signer: "0x01"}, due, 27_600)
			if raised != (tc.want != 0) || got != tc.want {
				t.Fatalf("raised to %d (%v), want %d", got, raised, tc.want)
			}
		})
	}
}
