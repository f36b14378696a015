package workers

import (
	"context"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// RetentionLoop deletes final rows past the retention horizon every retention.interval.
type RetentionLoop struct{ *Loop }

// NewRetentionLoop builds the loop.
func NewRetentionLoop(c Intervals, retention *services.Retention, admin *services.AdminRetention, logger log.Logger) *RetentionLoop {
	helper := log.NewHelper(log.With(logger, "component", "retention"))
	return &RetentionLoop{NewLoop(c.Retention, func(ctx context.Context) {
		if _, err := retention.Prune(ctx); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "retention pass failed", "error", err.Error())
		}
		if admin == nil {
			return
		}
		if err := admin.Prune(ctx); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "audit and policy retention pass failed", "error", err.Error())
		}
	})}
}
