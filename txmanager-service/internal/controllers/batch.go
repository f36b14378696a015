package controllers

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// MaxBatchCreates bounds one CreateTxBatch call.
const MaxBatchCreates = 1000

// CreateTxBatch implements v1.TxServiceServer: every create runs as CreateTx would, at once,
// so the writer takes them into the same few allocation transactions; each is answered on
// its own, and one refusal does not touch the others, nor does one create that cannot be
// served in time (answerInTime).
func (c *TxController) CreateTxBatch(ctx context.Context, req *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	if _, err := principal(ctx); err != nil {
		return nil, err
	}
	creates := req.GetCreates()
	switch {
	case len(creates) == 0:
		return nil, v1.InvalidArgument("creates", "a batch needs at least one create")
	case len(creates) > MaxBatchCreates:
		return nil, v1.InvalidArgument("creates", fmt.Sprintf("at most %d creates a batch (this one has %d); split it", MaxBatchCreates, len(creates)))
	}
	out := &v1.CreateTxBatchResponse{Results: make([]*v1.CreateTxResult, len(creates))}
	ctx, cancel := answerInTime(ctx)
	defer cancel()
	first := make(map[batchKey]int, len(creates))
	var wg sync.WaitGroup
	for i, create := range creates {
		if key, ok := c.keyOf(create); ok {
			if earlier, repeated := first[key]; repeated {
				out.Results[i] = v1.CreateResultOf(nil, v1.InvalidArgument(fmt.Sprintf("creates[%d].requestId", i),
					fmt.Sprintf("repeats creates[%d] of this batch (same signer and requestId); send it once", earlier)))
				continue
			}
			first[key] = i
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out.Results[i] = v1.CreateResultOf(c.CreateTxIsolated(ctx, create))
		}()
	}
	wg.Wait()
	for _, r := range out.Results {
		switch {
		case r.GetError() != nil:
			out.Refused++
		case r.GetResponse().GetCreated():
			out.Created++
		default:
			out.Replayed++
		}
	}
	return out, nil
}

// batchAnswerMargin is the most of the caller's time a batch keeps back to send its answer.
const batchAnswerMargin = time.Second

// answerInTime bounds a batch's creates a little before the caller's deadline (a tenth of
// the time left, at most batchAnswerMargin). A batch is answered once all of its creates
// are; a create waiting for a signer's owner it cannot reach waits out its deadline, and
// without the margin the whole answer, the other creates' included, would come after the
// caller gave up: the caller would send every create again and get the same wait.
func answerInTime(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline.Add(-min(time.Until(deadline)/10, batchAnswerMargin)))
}

// batchKey names an idempotent create within a batch: its chain, signer and requestId.
type batchKey struct {
	chain     uint64
	signer    string
	requestID string
}

// keyOf is the create's idempotency key, when it has one.
func (c *TxController) keyOf(create *v1.CreateTxRequest) (batchKey, bool) {
	if create.GetRequestId() == "" {
		return batchKey{}, false
	}
	chain := create.GetChainId()
	if ch, err := c.chains.Lookup(chain); err == nil {
		chain = ch.ID // 0 names the only chain
	}
	// A create whose signer does not parse is refused on its own, and names no key a valid
	// create of the batch could repeat.
	signer, err := domain.ParseAddress("signer", create.GetSigner())
	if err != nil {
		return batchKey{}, false
	}
	return batchKey{chain: chain, signer: signer.Hex(), requestID: create.GetRequestId()}, true
}

// CreateTxIsolated is CreateTx for one create of many served at once on goroutines of their
// own, out of the reach of the server's recovery: a panic is answered INTERNAL for this
// create alone, logged with its stack, instead of ending the process.
func (c *TxController) CreateTxIsolated(ctx context.Context, create *v1.CreateTxRequest) (resp *v1.CreateTxResponse, err error) {
	defer func() {
		if panicValue := recover(); panicValue != nil {
			stack := make([]byte, 64<<10)
			stack = stack[:runtime.Stack(stack, false)]
			c.log.Errorw("msg", "panic while serving one create of a batch", "panic", fmt.Sprint(panicValue), "stack", string(stack))
			resp, err = nil, v1.ErrorInternal("internal error")
		}
	}()
	return c.CreateTx(ctx, create)
}
