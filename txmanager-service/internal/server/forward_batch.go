package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Batching of forwarded creates. A call to the owner costs both nodes more than the create
// it carries (HTTP/2 stream, headers, the server's middleware), and in forward mode two
// creates in three are forwarded; so the creates waiting for one owner go in one call.
// Nothing waits on a timer: a create that finds fewer than forwardInflight calls running
// goes at once, and the ones that arrive while calls run go together in the next.
const (
	// forwardBatchLimit bounds the creates of one call (the owner refuses more than
	// maxForwardBatch), and forwardBatchBytes their encoded size: well inside the message
	// size the owner takes (server.maxBodyBytes, 512 KiB by default). A create larger than
	// that alone goes in a call of its own.
	forwardBatchLimit = 128
	forwardBatchBytes = 192 << 10
	// forwardInflight is how many calls to one owner may run at once for one caller.
	forwardInflight = 4
	// forwardBatchTimeout bounds a call for the creates that came without a deadline.
	forwardBatchTimeout = 30 * time.Second
	// unbatchedFor is how long creates to an owner without ForwardCreates go one call
	// each before a batch is tried again (the owner may have been upgraded meanwhile).
	unbatchedFor = time.Minute
)

// forwardItem is one create waiting for its owner's answer.
type forwardItem struct {
	ctx  context.Context
	req  *v1.CreateTxRequest
	done chan forwardResult // buffered: the batch never blocks on a caller that gave up
	// state is itemQueued until a sender takes the item into a call (itemSent) or its
	// caller gives up first (itemAbandoned); whichever comes first decides.
	state atomic.Int32
}

const (
	itemQueued int32 = iota
	itemSent
	itemAbandoned
)

// forward queues req and waits for its answer. A caller whose context ends first is told
// whether the create had gone to the owner: if it had, the owner may have made it, and
// without a requestId a second create could not be told from it (ErrSentUnanswered).
func (b *createBatcher) forward(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	item := &forwardItem{ctx: ctx, req: req, done: make(chan forwardResult, 1)}
	b.add(item)
	select {
	case r := <-item.done:
		return r.resp, r.err
	case <-ctx.Done():
		if item.state.CompareAndSwap(itemQueued, itemAbandoned) {
			return nil, &domain.UnavailableError{Reason: "lease owner did not answer in time", Err: ctx.Err()}
		}
		return nil, &domain.UnavailableError{Reason: "lease owner did not answer in time", Err: fmt.Errorf("%w: %w", domain.ErrSentUnanswered, ctx.Err())}
	}
}

type forwardResult struct {
	resp *v1.CreateTxResponse
	err  error
}

// createBatcher queues the creates for one owner that carry the same hop count and caller
// credentials (the call's metadata), and sends them in batches.
type createBatcher struct {
	peer       v1.PeerServiceClient
	single     v1.TxServiceClient
	md         metadata.MD
	propagator propagation.TextMapPropagator
	// unbatchedUntil (unix nanoseconds): until then the owner is taken not to know
	// ForwardCreates (a node of an earlier version during a rolling upgrade), and creates go
	// to it one call each.
	unbatchedUntil atomic.Int64

	mu       sync.Mutex
	pending  []*forwardItem
	inflight int
	lastUsed time.Time
}

func newCreateBatcher(conn grpc.ClientConnInterface, md metadata.MD, propagator propagation.TextMapPropagator) *createBatcher {
	return &createBatcher{peer: v1.NewPeerServiceClient(conn), single: v1.NewTxServiceClient(conn), md: md, propagator: propagator, lastUsed: time.Now()}
}

// batchKey names the queue for creates carrying md: only creates of one caller, at one
// hop count, may share a call.
func batchKey(md metadata.MD) string {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(strings.Join(md[k], "\x01"))
		b.WriteByte(0)
	}
	return b.String()
}

// add queues item and starts a sender unless forwardInflight of them are running already
// (one of those takes it when its call returns).
func (b *createBatcher) add(item *forwardItem) {
	b.mu.Lock()
	b.pending = append(b.pending, item)
	b.lastUsed = time.Now()
	start := b.inflight < forwardInflight
	if start {
		b.inflight++
	}
	b.mu.Unlock()
	if start {
		go b.sendPending()
	}
}

// idleSince is how long the queue has had nothing to do (0 while it has).
func (b *createBatcher) idleSince(now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inflight > 0 || len(b.pending) > 0 {
		return 0
	}
	return now.Sub(b.lastUsed)
}

// sendPending sends what is queued, a batch at a time, until the queue is empty.
func (b *createBatcher) sendPending() {
	for {
		b.mu.Lock()
		n := batchLength(b.pending)
		if n == 0 {
			b.inflight--
			b.mu.Unlock()
			return
		}
		batch := slices.Clone(b.pending[:n])
		b.pending = slices.Delete(b.pending, 0, n)
		b.mu.Unlock()
		b.send(batch)
	}
}

// batchLength is how many of the queued items the next call takes: at least one, at most
// forwardBatchLimit, and no more than fit in forwardBatchBytes.
func batchLength(queued []*forwardItem) int {
	n, size := 0, 0
	for _, it := range queued {
		size += proto.Size(it.req)
		if n == forwardBatchLimit || (n > 0 && size > forwardBatchBytes) {
			break
		}
		n++
	}
	return n
}

// send makes one call for batch and answers every item.
func (b *createBatcher) send(batch []*forwardItem) {
	// A caller that gave up is not sent: its create was never acknowledged to anyone. One
	// taken into the call counts as sent from here on (forward).
	live := slices.DeleteFunc(batch, func(it *forwardItem) bool {
		return it.ctx.Err() != nil || !it.state.CompareAndSwap(itemQueued, itemSent)
	})
	if len(live) == 0 {
		return
	}
	if time.Now().UnixNano() < b.unbatchedUntil.Load() {
		b.sendEach(live)
		return
	}
	ctx, cancel := batchContext(live)
	defer cancel()
	call := &v1.ForwardCreatesRequest{Creates: make([]*v1.CreateTxRequest, len(live)), TimeoutsMs: make([]uint32, len(live))}
	for i, it := range live {
		call.Creates[i] = it.req
		if deadline, ok := it.ctx.Deadline(); ok {
			call.TimeoutsMs[i] = uint32(max(time.Until(deadline).Milliseconds(), 1))
		}
	}
	// The call continues the first caller's trace; the others' spans end at the forwarder.
	resp, err := b.peer.ForwardCreates(outgoingWith(ctx, live[0].ctx, b.md, b.propagator), call)
	switch status.Code(err) {
	case codes.Unimplemented:
		b.unbatchedUntil.Store(time.Now().Add(unbatchedFor).UnixNano())
		b.sendEach(live)
		return
	case codes.ResourceExhausted:
		// The owner takes smaller messages than this node: each create goes on its own.
		if len(live) > 1 {
			b.sendEach(live)
			return
		}
	}
	if err == nil && len(resp.GetResults()) != len(live) {
		err = &domain.UnavailableError{Reason: fmt.Sprintf("lease owner answered %d of %d forwarded creates", len(resp.GetResults()), len(live)), Err: domain.ErrSentUnanswered}
	}
	if err != nil {
		failed := fromPeer(err)
		for _, it := range live {
			it.done <- forwardResult{err: failed}
		}
		return
	}
	for i, r := range resp.GetResults() {
		switch result := r.GetResult().(type) {
		case *v1.CreateTxResult_Response:
			live[i].done <- forwardResult{resp: result.Response}
		case *v1.CreateTxResult_Error:
			live[i].done <- forwardResult{err: result.Error.AsError()}
		default:
			live[i].done <- forwardResult{err: &domain.UnavailableError{Reason: "lease owner answered a forwarded create with nothing", Err: domain.ErrSentUnanswered}}
		}
	}
}

// sendEach sends every item in a call of its own, side by side.
func (b *createBatcher) sendEach(items []*forwardItem) {
	var wg sync.WaitGroup
	for _, it := range items {
		wg.Go(func() {
			resp, err := b.single.CreateTx(outgoingWith(it.ctx, it.ctx, b.md, b.propagator), it.req)
			it.done <- forwardResult{resp: resp, err: fromPeer(err)}
		})
	}
	wg.Wait()
}

// batchContext bounds a call by the latest of its callers' deadlines (each caller still
// stops waiting at its own), and keeps the first caller's values for the client's spans.
func batchContext(items []*forwardItem) (context.Context, context.CancelFunc) {
	var latest time.Time
	for _, it := range items {
		deadline, ok := it.ctx.Deadline()
		if !ok {
			deadline = time.Now().Add(forwardBatchTimeout)
		}
		if deadline.After(latest) {
			latest = deadline
		}
	}
	return context.WithDeadline(context.WithoutCancel(items[0].ctx), latest)
}
