package submitting

import (
	"context"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/domain"
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
	if d.SubState != domain.SubStateL1GasShort || d.IntentGasLimit != 0 || current == 0 {
		return 0, false
	}
	if s.cfg.Fees.CappedBy(d.IntentMaxFee, nil).MaxFeeCap == nil {
		s.log.WithContext(ctx).Warnw("msg", "short of the L1 part with a gas limit the service estimated, but no fee cap (fees.maxFeePerGas) bounds what a larger limit would cost; broadcasting it as it is",
			"signer", lease.Signer, "tx_id", d.TxID.String(), "gas_limit", current)
		return 0, false
	}
	var tx types.Transaction
	if err := tx.UnmarshalBinary(d.Raw); err != nil {
		return 0, false
	}
	estimate, err := s.chain.EstimateGas(ctx, services.CallRequest{From: common.HexToAddress(lease.Signer), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	if err != nil {
		s.log.WithContext(ctx).Warnw("msg", "short of the L1 part, and the node gave no gas estimate; broadcasting it as it is", "signer", lease.Signer,
			"tx_id", d.TxID.String(), "error", err.Error())
		return 0, false
	}
	raised := services.PadGasEstimate(estimate, s.cfg.GasEstimateMultiplier, s.cfg.MaxGasLimit)
	if raised <= current {
		return 0, false
	}
	return raised, true
}
