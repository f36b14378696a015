package submitting

import (
	"context"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Arbitrum counts a transaction's L1 cost as gas. A gas limit the service estimated priced
// that part at the L1 price of the create; once the price rose, the node refuses the
// transaction as "intrinsic gas too low" (L1_GAS_SHORT), and would until the price fell
// again. Such a transaction is signed again with the node's estimate now, padded as the
// create pads its first one (create.gasEstimateMultiplier), for the price to rise further. Its fee cap per gas falls as its limit rises
// (services.FeePolicy.ForAdmittedGas), so its worst-case fee stays what the funds check, the
// spending policies and the client's cap counted when it was admitted. A limit the client
// named is the client's to keep: that transaction is broadcast again as it is, and cancelled
// at the head of the line past the stuck thresholds.

// raisedGasLimit answers the gas limit a transaction refused short of the L1 part is signed
// again with, and false when it keeps its own (current): the client named it, no fee cap
// bounds what a larger limit would cost, or the node's estimate now is no larger.
func (s *Submitter) raisedGasLimit(ctx context.Context, lease domain.Lease, d DueResubmit, current uint64) (uint64, bool) {
	// The intent's own attempts only: a resolution's cancellation is priced by the node's
	// estimate already, and a transaction admitted without a limit on record has no bound.
	if d.SubState != domain.SubStateL1GasShort || d.IntentGasLimit != 0 || d.AdmittedGasLimit == 0 || current == 0 || !boundByAdmission(d.Kind) {
		return 0, false
	}
	if s.cfg.Fees.CappedBy(d.IntentMaxFee, nil).MaxFeeCap == nil {
		s.warnOnce(ctx, d.TxID, "short of the L1 part with a gas limit the service estimated, but no fee cap (fees.maxFeePerGas) bounds what a larger limit would cost; broadcasting it as it is",
			"signer", lease.Signer, "tx_id", d.TxID.String(), "gas_limit", current)
		return 0, false
	}
	var tx types.Transaction
	if err := tx.UnmarshalBinary(d.Raw); err != nil {
		return 0, false
	}
	estimate, err := s.chain.EstimateGas(ctx, services.CallRequest{From: common.HexToAddress(lease.Signer), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	if err != nil {
		s.warnOnce(ctx, d.TxID, "short of the L1 part, and the node gave no gas estimate; broadcasting it as it is", "signer", lease.Signer,
			"tx_id", d.TxID.String(), "error", err.Error())
		return 0, false
	}
	raised := services.PadGasEstimate(estimate, s.cfg.GasEstimateMultiplier, s.cfg.MaxGasLimit)
	if raised <= current {
		return 0, false
	}
	return raised, true
}

// boundByAdmission: attempts of this kind carry the intent, whose worst-case fee was counted
// at admission; a cancellation or another resolution is priced on its own.
func boundByAdmission(kind pipeline.AttemptKind) bool {
	return kind == pipeline.AttemptOriginal || kind == pipeline.AttemptReplace
}

// warnOnce logs a warning about a transaction the first time only: a re-gas left undone is
// asked again at every resubmission.
func (s *Submitter) warnOnce(ctx context.Context, txID uuid.UUID, msg string, keyvals ...any) {
	if _, seen := s.regasWarned.LoadOrStore(txID, struct{}{}); seen {
		return
	}
	if s.regasWarnings.Add(1) > maxRegasWarnings {
		s.regasWarned.Clear()
		s.regasWarnings.Store(0)
	}
	s.log.WithContext(ctx).Warnw(append([]any{"msg", msg}, keyvals...)...)
}

// maxRegasWarnings bounds the transactions remembered as warned about.
const maxRegasWarnings = 10_000
