package workers

import (
	"context"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// PipelineConfig sets how often each loop runs.
type PipelineConfig struct {
	SubmitInterval   time.Duration
	FinalityInterval time.Duration
	ResubmitScan     time.Duration
	StuckScan        time.Duration
	AdoptInterval    time.Duration
	Receipts         ReceiptCheckerConfig
}

// PipelineWorkers run the chain pipeline: submitting, receipts, finality, resubmission,
// stuck detection, and adopting signers whose transactions nobody drives. Every loop works
// only on signers whose lease this node holds.
type PipelineWorkers struct {
	pipeline *services.Pipeline
	leases   *services.LeaseManager
	log      *log.Helper

	submit   *Loop
	finality *Loop
	resubmit *Loop
	stuck    *Loop
	adopt    *Loop
	Receipts *ReceiptChecker
}

// NewPipelineWorkers builds the loops.
func NewPipelineWorkers(cfg PipelineConfig, pipeline *services.Pipeline, leases *services.LeaseManager, logger log.Logger) *PipelineWorkers {
	w := &PipelineWorkers{pipeline: pipeline, leases: leases, log: log.NewHelper(log.With(logger, "component", "pipeline-workers"))}
	w.submit = NewLoop(cfg.SubmitInterval, w.submitPass)
	w.finality = NewLoop(cfg.FinalityInterval, w.finalityPass)
	w.resubmit = NewLoop(cfg.ResubmitScan, w.resubmitPass)
	w.stuck = NewLoop(cfg.StuckScan, w.stuckPass)
	w.adopt = NewLoop(cfg.AdoptInterval, w.adoptPass)
	w.Receipts = NewReceiptChecker(cfg.Receipts, pipeline, leases, w.finality.Wake, logger)
	return w
}

// NotifyAllocated implements services.SubmitNotifier.
func (w *PipelineWorkers) NotifyAllocated(string) { w.submit.Wake() }

func (w *PipelineWorkers) loops() []*Loop {
	return []*Loop{w.adopt, w.submit, w.Receipts.Loop, w.finality, w.resubmit, w.stuck}
}

// Start launches every loop.
func (w *PipelineWorkers) Start(ctx context.Context) {
	for _, l := range w.loops() {
		l.Start(ctx)
	}
	w.adopt.Wake()
}

// Stop interrupts and waits for every loop.
func (w *PipelineWorkers) Stop() {
	for _, l := range w.loops() {
		l.Stop()
	}
}

// eachHeld runs fn for every signer lease this node can trust now.
func (w *PipelineWorkers) eachHeld(ctx context.Context, what string, fn func(context.Context, domain.Lease) error) {
	for _, lease := range w.leases.Held() {
		if ctx.Err() != nil {
			return
		}
		if err := fn(ctx, lease); err != nil && ctx.Err() == nil {
			w.log.Warnw("msg", what+" failed", "signer", lease.Signer, "fencing_token", lease.Token, "error", err.Error())
		}
	}
}

func (w *PipelineWorkers) submitPass(ctx context.Context) {
	w.eachHeld(ctx, "submit", func(ctx context.Context, lease domain.Lease) error {
		// Drain: a hot signer may have more allocated than one pass signs.
		for ctx.Err() == nil {
			n, err := w.pipeline.SubmitAllocated(ctx, lease)
			if err != nil || n == 0 {
				return err
			}
		}
		return nil
	})
}

func (w *PipelineWorkers) finalityPass(ctx context.Context) {
	signers := w.leases.HeldSigners()
	if len(signers) == 0 {
		return
	}
	reorged, err := w.pipeline.AdvanceFinality(ctx, signers)
	if err != nil {
		w.log.Warnw("msg", "finality pass failed", "error", err.Error())
	}
	if reorged > 0 {
		w.resubmit.Wake()
		w.Receipts.Wake()
	}
}

func (w *PipelineWorkers) resubmitPass(ctx context.Context) {
	w.eachHeld(ctx, "resubmit", func(ctx context.Context, lease domain.Lease) error {
		_, err := w.pipeline.ResubmitDue(ctx, lease, 256)
		return err
	})
}

func (w *PipelineWorkers) stuckPass(ctx context.Context) {
	w.eachHeld(ctx, "stuck detection", func(ctx context.Context, lease domain.Lease) error {
		_, err := w.pipeline.DetectStuck(ctx, lease)
		return err
	})
}

func (w *PipelineWorkers) adoptPass(ctx context.Context) {
	if err := w.pipeline.AdoptOpenSigners(ctx); err != nil {
		w.log.Warnw("msg", "adopting open signers failed", "error", err.Error())
	}
}
