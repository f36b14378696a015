package workers

import (
	"context"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// FundingLoop looks at the balances of the chain's signers that have funding marks every
// create.fundsGaugeInterval: low-balance events and refills.
type FundingLoop struct{ *Loop }

// NewFundingLoop builds the loop.
func NewFundingLoop(c Intervals, watch *services.FundingWatch, logger log.Logger) *FundingLoop {
	helper := log.NewHelper(log.With(logger, "component", "funding"))
	return &FundingLoop{boundedLoop(c.FundsGauge, func(ctx context.Context) {
		if err := watch.Pass(ctx); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "funding pass failed", "error", err.Error())
		}
	})}
}

// FundsGaugeLoop refreshes every managed signer's balance gauges each
// create.fundsGaugeInterval, so a signer running dry shows before its creates are refused.
type FundsGaugeLoop struct{ *Loop }

// NewFundsGaugeLoop builds the loop.
func NewFundsGaugeLoop(c Intervals, funds *services.FundsGuard, signers services.SignerDirectory, logger log.Logger) *FundsGaugeLoop {
	helper := log.NewHelper(log.With(logger, "component", "funds"))
	return &FundsGaugeLoop{NewLoop(c.FundsGauge, func(ctx context.Context) {
		if err := funds.Refresh(ctx, signers.Addresses()); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "signer balance refresh failed", "error", err.Error())
		}
	})}
}
