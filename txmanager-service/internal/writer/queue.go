package writer

import (
	"context"
	"hash/maphash"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// QueueConfig sizes the writer's queues and batches.
type QueueConfig struct {
	Workers   int
	BatchSize int
	// BatchWait: after the first op, how long a worker waits for more before writing.
	// 0 writes whatever is queued at once; batches still form under load because ops queue
	// up while the previous batch commits.
	BatchWait time.Duration
	// QueueSize bounds each worker's queue; a full queue answers UNAVAILABLE at once.
	QueueSize int
}

// BatchAllocator writes one batch (Allocator).
type BatchAllocator interface {
	AllocateBatch(ctx context.Context, ops []*Op)
}

// Writer routes creates to a fixed worker by hash(signer) % N, so one signer's creates are
// serialised on one goroutine, and each worker writes what it has queued as one batch
// transaction (docs/design.md#writer-batches).
type Writer struct {
	cfg       QueueConfig
	allocator BatchAllocator
	seed      maphash.Seed
	queues    []chan *Op

	intake sync.RWMutex // held for reading while enqueueing; Stop takes it to close intake
	closed bool
	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// New builds the writer and registers its queue-depth gauge.
func New(cfg QueueConfig, allocator BatchAllocator, metrics *telemetry.Metrics) (*Writer, error) {
	w := &Writer{cfg: cfg, allocator: allocator, seed: maphash.MakeSeed(), queues: make([]chan *Op, cfg.Workers)}
	for i := range w.queues {
		w.queues[i] = make(chan *Op, cfg.QueueSize)
	}
	err := metrics.RegisterGauge(telemetry.WriterQueueDepth, "Create operations waiting in the writer's queues, per worker.",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			for i, q := range w.queues {
				record(int64(len(q)), attribute.Int("worker", i))
			}
		})
	return w, err
}

// Start launches the workers.
func (w *Writer) Start(ctx context.Context) {
	ctx, w.cancel = context.WithCancel(context.WithoutCancel(ctx))
	for i := range w.queues {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.run(ctx, w.queues[i])
		}()
	}
}

// Allocate implements services.AllocationQueue: the create joins its signer's worker's
// next batch, and the answer comes back when that batch has committed (or failed), or when
// ctx ends. A full queue answers at once.
func (w *Writer) Allocate(ctx context.Context, req domain.CreateRequest, gasLimit uint64, resolved func(domain.ManagedTx, bool, error)) (domain.ManagedTx, bool, error) {
	op := NewOp(ctx, req, gasLimit)
	op.resolved = resolved
	if err := w.enqueue(op); err != nil {
		if resolved != nil {
			resolved(domain.ManagedTx{}, false, err)
		}
		return domain.ManagedTx{}, false, err
	}
	return op.Wait(ctx)
}

// enqueue never blocks.
func (w *Writer) enqueue(op *Op) error {
	w.intake.RLock()
	defer w.intake.RUnlock()
	if w.closed {
		return &domain.UnavailableError{Reason: "node is shutting down", RetryAfter: time.Second}
	}
	op.queuedAt = time.Now()
	select {
	case w.queues[w.route(op.Signer())] <- op:
		return nil
	default:
		return &domain.UnavailableError{Reason: "writer queue full", RetryAfter: time.Second}
	}
}

func (w *Writer) route(signer string) int {
	return int(maphash.String(w.seed, signer) % uint64(len(w.queues)))
}

// Stop closes intake, lets the workers write everything already queued, and waits for
// them; if ctx ends first, the remaining ops are failed rather than left hanging.
func (w *Writer) Stop(ctx context.Context) {
	w.intake.Lock()
	if w.closed {
		w.intake.Unlock()
		return
	}
	w.closed = true
	for _, q := range w.queues {
		close(q)
	}
	w.intake.Unlock()
	done := make(chan struct{})
	go func() { w.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		w.cancel()
		<-done
	}
	w.cancel()
}

func (w *Writer) run(ctx context.Context, queue chan *Op) {
	batch := make([]*Op, 0, w.cfg.BatchSize)
	for first := range queue {
		batch = append(batch[:0], first)
		batch = w.fill(queue, batch)
		if ctx.Err() != nil {
			for _, op := range batch {
				op.Fail(&domain.UnavailableError{Reason: "node is shutting down", RetryAfter: time.Second})
			}
		} else {
			w.allocator.AllocateBatch(ctx, batch)
		}
	}
}

// fill adds whatever is queued, then waits up to BatchWait for more, never past BatchSize.
func (w *Writer) fill(queue chan *Op, batch []*Op) []*Op {
drain:
	for len(batch) < w.cfg.BatchSize {
		select {
		case op, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, op)
		default:
			break drain
		}
	}
	if w.cfg.BatchWait <= 0 || len(batch) >= w.cfg.BatchSize {
		return batch
	}
	timer := time.NewTimer(w.cfg.BatchWait)
	defer timer.Stop()
	for len(batch) < w.cfg.BatchSize {
		select {
		case op, ok := <-queue:
			if !ok {
				return batch
			}
			batch = append(batch, op)
		case <-timer.C:
			return batch
		}
	}
	return batch
}
