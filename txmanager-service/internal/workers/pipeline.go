package workers

import (
	"context"
	"errors"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// quarantinedPassInterval paces reconciliation while some signer is quarantined.
const quarantinedPassInterval = time.Second

// PipelineConfig sets how often each loop runs.
type PipelineConfig struct {
	SubmitInterval   time.Duration
	FinalityInterval time.Duration
	ResubmitScan     time.Duration
	// ResubmitBatch bounds one signer's rebroadcasts per scan.
	ResubmitBatch int
	StuckScan     time.Duration
	AdoptInterval time.Duration
	// SignerConcurrency bounds how many signers each per-signer loop serves at once.
	SignerConcurrency int
}

// PipelineStages are the chain pipeline's stages, which the loops drive.
type PipelineStages struct {
	Submitting *submitting.Submitter
	Receipts   *receipts.Tracker
	Schedule   *receipts.Schedule
	Stuck      *stuck.Resolver
	Reconcile  *reconcile.Reconciler
	Open       *services.OpenSigners
}

// ReceiptLoop runs the receipt schedule's passes (pipeline/receipts owns the schedule).
type ReceiptLoop struct {
	*Loop
	schedule *receipts.Schedule
}

// newReceiptLoop runs schedule for the leases this node holds, and wakes finality when a
// pass says so.
func newReceiptLoop(schedule *receipts.Schedule, leases *services.LeaseManager, wakeFinality func()) *ReceiptLoop {
	l := &ReceiptLoop{schedule: schedule}
	l.Loop = NewLoop(schedule.Tick(), func(ctx context.Context) {
		if schedule.Pass(ctx, leases.Held()) {
			wakeFinality()
		}
	})
	return l
}

// RefreshSoon has the next pass re-read the schedule from the database, soon.
func (l *ReceiptLoop) RefreshSoon() {
	l.schedule.RefreshSoon()
	l.Wake()
}

// PipelineWorkers run the chain pipeline: submitting, receipts, finality, resubmission,
// stuck detection and reconciliation, and adopting signers whose transactions nobody
// drives. Every loop works only on signers whose lease this node holds.
type PipelineWorkers struct {
	stages PipelineStages
	leases *services.LeaseManager
	log    *log.Helper

	submit   *Loop
	finality *Loop
	resubmit *Loop
	stuck    *Loop
	adopt    *Loop
	Receipts *ReceiptLoop
	// Per-signer work of the submit, resubmit and stuck loops: each signer on its own.
	submitTasks, resubmitTasks, stuckTasks *signerTasks
	// feed positions the completions finality writes.
	feed *FeedSequencerLoop
	// resubmitBatch bounds one signer's rebroadcasts per scan.
	resubmitBatch int
	// repeats keeps a signer's failure that repeats every pass to one line a minute.
	repeats repeatedWarnings
}

// NewPipelineWorkers builds the loops.
func NewPipelineWorkers(cfg PipelineConfig, stages PipelineStages, leases *services.LeaseManager, feed *FeedSequencerLoop, logger log.Logger) *PipelineWorkers {
	w := &PipelineWorkers{stages: stages, leases: leases, feed: feed, resubmitBatch: cfg.ResubmitBatch, log: log.NewHelper(log.With(logger, "component", "pipeline-workers")),
		submitTasks: newSignerTasks(cfg.SignerConcurrency), resubmitTasks: newSignerTasks(cfg.SignerConcurrency), stuckTasks: newSignerTasks(cfg.SignerConcurrency)}
	w.submit = NewLoop(cfg.SubmitInterval, w.submitPass)
	w.finality = NewLoop(cfg.FinalityInterval, w.finalityPass)
	w.resubmit = NewLoop(cfg.ResubmitScan, w.resubmitPass)
	w.stuck = NewLoop(cfg.StuckScan, w.stuckPass)
	w.adopt = NewLoop(cfg.AdoptInterval, w.adoptPass)
	w.Receipts = newReceiptLoop(stages.Schedule, leases, w.finality.Wake)
	// A replacement's hash is one more for the receipt schedule to look for.
	if stages.Submitting != nil {
		stages.Submitting.OnReplaced(w.Receipts.RefreshSoon)
	}
	if stages.Stuck != nil {
		stages.Stuck.OnAttemptRecorded(w.Receipts.RefreshSoon)
	}
	return w
}

// NotifyAllocated implements services.SubmitNotifier.
func (w *PipelineWorkers) NotifyAllocated(lease domain.Lease, next uint64) {
	w.stages.Submitting.Allocated(lease, next)
	w.submit.Wake()
}

// NotifyQuarantined implements services.SubmitNotifier: reconciliation, which runs with
// stuck detection, starts at once.
func (w *PipelineWorkers) NotifyQuarantined(string) { w.stuck.Wake() }

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

// Stop interrupts and waits for every loop and the per-signer work they started.
func (w *PipelineWorkers) Stop() {
	for _, l := range w.loops() {
		l.Stop()
	}
	for _, t := range []*signerTasks{w.submitTasks, w.resubmitTasks, w.stuckTasks} {
		t.wait()
	}
}

// eachHeld runs fn for every signer lease this node can trust now, each signer on its
// own (tasks), so a signer whose calls hang until their deadline delays no other.
func (w *PipelineWorkers) eachHeld(ctx context.Context, tasks *signerTasks, what string, fn func(context.Context, domain.Lease) error) {
	tasks.run(ctx, w.leases.Held(), func(ctx context.Context, lease domain.Lease) {
		err := fn(ctx, lease)
		key := what + " " + lease.Signer
		if err == nil {
			w.repeats.passed(key)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if ok, held := w.repeats.allow(key, err.Error(), time.Now()); ok {
			w.log.Warnw("msg", what+" failed", "signer", lease.Signer, "fencing_token", lease.Token, "error", err.Error(), "same_failures_since_last_logged", held)
		}
	})
}

func (w *PipelineWorkers) submitPass(ctx context.Context) {
	w.eachHeld(ctx, w.submitTasks, "submit", func(ctx context.Context, lease domain.Lease) error {
		_, err := w.stages.Submitting.SubmitAllocated(ctx, lease, w.stages.Schedule.TrackUnsent)
		return err
	})
}

func (w *PipelineWorkers) finalityPass(ctx context.Context) {
	signers := w.leases.HeldSigners()
	if len(signers) == 0 {
		return
	}
	reorged, err := w.stages.Receipts.AdvanceFinality(ctx, signers)
	if err != nil {
		w.log.Warnw("msg", "finality pass failed", "error", err.Error())
	}
	// Finality positioned its completions itself; the round that follows wakes this node's
	// long-polls for them at once (and positions any reconciliation wrote meanwhile).
	w.feed.Wake()
	if reorged > 0 {
		// The reverted rows await receipts again, which the schedule learns from the database,
		// and are due for resubmission at once.
		w.stages.Submitting.ResubmitSoon()
		w.resubmit.Wake()
		w.Receipts.RefreshSoon()
	}
}

func (w *PipelineWorkers) resubmitPass(ctx context.Context) {
	w.eachHeld(ctx, w.resubmitTasks, "resubmit", func(ctx context.Context, lease domain.Lease) error {
		_, err := w.stages.Submitting.ResubmitDue(ctx, lease, w.resubmitBatch)
		return err
	})
}

func (w *PipelineWorkers) stuckPass(ctx context.Context) {
	w.eachHeld(ctx, w.stuckTasks, "stuck detection", func(ctx context.Context, lease domain.Lease) error {
		// What holds a head of line up and a machine can settle comes first
		// (reconciliation with the chain); then the stuck policy.
		reconciled, reconcileErr := w.stages.Reconcile.Pass(ctx, lease)
		if reconciled.Quarantined {
			// Its recovery goes on in bounded steps, and an operator's release waits for it.
			w.stuck.WakeAfter(quarantinedPassInterval)
		}
		if reconciled.Recorded > 0 {
			w.Receipts.RefreshSoon()
			w.stages.Submitting.ResubmitSoon()
		}
		if reconciled.Placeholders > 0 {
			// Written below the nonces the submitter has signed, where its passes do not
			// look unless told.
			w.stages.Submitting.Rescan(lease.Signer)
			w.submit.Wake()
		}
		_, stuckErr := w.stages.Stuck.DetectStuck(ctx, lease)
		return errors.Join(reconcileErr, stuckErr)
	})
}

func (w *PipelineWorkers) adoptPass(ctx context.Context) {
	acquired, err := w.stages.Open.Adopt(ctx)
	if err != nil {
		w.log.Warnw("msg", "adopting open signers failed", "error", err.Error())
	}
	if acquired > 0 {
		// What an adopted signer needs first: reconciliation (a quarantine's recovery among
		// it), then its unsent transactions.
		w.stuck.Wake()
		w.submit.Wake()
	}
}
