package writer

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Op is one create request travelling through the writer. It is resolved exactly once: with a new transaction, an existing one (idempotent replay), or
// an error.
type Op struct {
	Request     domain.CreateRequest
	Fingerprint [32]byte
	// GasLimit is the effective gas limit (the client's or the estimate).
	GasLimit uint64

	// requestSpan is the span of the request that made the op: the writer batch, which
	// runs on the worker's context, links to it so a request's trace leads to its batch.
	requestSpan trace.SpanContext
	// queuedAt is when the op reached its worker's queue (writer_phase_seconds{phase="queued"}).
	queuedAt time.Time

	// resolved, when set, is told the outcome as the op is resolved, whoever still waits.
	resolved func(domain.ManagedTx, bool, error)

	done    chan struct{}
	tx      domain.ManagedTx
	created bool
	err     error
}

// NewOp prepares an op for req, made while serving the request in ctx.
func NewOp(ctx context.Context, req domain.CreateRequest, gasLimit uint64) *Op {
	if req.SignerHex == "" {
		req.SignerHex = req.Signer.Hex()
	}
	return &Op{
		Request:     req,
		Fingerprint: req.Fingerprint(),
		GasLimit:    gasLimit,
		requestSpan: trace.SpanContextFromContext(ctx),
		done:        make(chan struct{}),
	}
}

// Signer is the key the writer routes by (EIP-55 form).
func (op *Op) Signer() string { return op.Request.SignerHex }

// Wait blocks until the op is resolved or ctx ends. The writer takes every op it was
// handed, whoever still waits for it: a create whose caller stops waiting may be written
// all the same, so its outcome is unknown (never "unavailable, try again", which without a
// request id would make it twice).
func (op *Op) Wait(ctx context.Context) (domain.ManagedTx, bool, error) {
	select {
	case <-op.done:
		return op.tx, op.created, op.err
	case <-ctx.Done():
		return domain.ManagedTx{}, false, fmt.Errorf("%w: the request ended while its create waited for the signer's writer, which still writes it: %w",
			domain.ErrOutcomeUnknown, ctx.Err())
	}
}

func (op *Op) resolve(tx domain.ManagedTx, created bool, err error) {
	op.tx, op.created, op.err = tx, created, err
	if op.resolved != nil {
		op.resolved(tx, created, err)
	}
	close(op.done)
}

// Fail resolves op with err (used by the writer when it cannot take the op).
func (op *Op) Fail(err error) { op.resolve(domain.ManagedTx{}, false, err) }
