package workers

import (
	"context"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ApprovalLoop ends the approvals past their expiry and gives approved intents their nonces,
// every create.approvalInterval, on every node: expiry ends each approval once whichever
// node runs it, and an approved intent is admitted by its signer's lease owner alone.
type ApprovalLoop struct{ *Loop }

// NewApprovalLoop builds the loop.
func NewApprovalLoop(c Intervals, desk *services.ApprovalDesk, chains *services.Chains, logger log.Logger) *ApprovalLoop {
	helper := log.NewHelper(log.With(logger, "component", "approvals"))
	return &ApprovalLoop{boundedLoop(c.Approvals, func(ctx context.Context) {
		if err := desk.ExpirePass(ctx); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "approval expiry pass failed", "error", err.Error())
		}
		for _, id := range chains.IDs() {
			chain, err := chains.Lookup(id)
			if err != nil {
				continue
			}
			if err := desk.AdmitPass(ctx, id, chain.Create); err != nil && ctx.Err() == nil {
				helper.Warnw("msg", "approval admission pass failed", "chain_id", id, "error", err.Error())
			}
		}
	})}
}
