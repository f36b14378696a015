package controllers

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// MaxBatchCreates bounds one CreateTxBatch call.
const MaxBatchCreates = 1000

// CreateTxBatch implements v1.TxServiceServer: every create runs as CreateTx would, at once,
// so the writer takes them into the same few allocation transactions; each is answered on
// its own, and one refusal does not touch the others.
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
		batchRunners.run(func() {
			defer wg.Done()
			out.Results[i] = v1.CreateResultOf(c.CreateTx(ctx, create))
		})
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

// batchRunners runs batches' creates, all of a batch's at once (each waits for the writer).
var batchRunners = &runners{idleFor: 30 * time.Second}

// runners runs functions on goroutines that stay for the next one while work keeps coming.
// A create's path is deep: on a new goroutine its stack grows (and is copied) a few times
// before the create is written, a twentieth of the service's CPU with batches of 100. A
// goroutine that ran a create before has its stack grown already.
type runners struct {
	// jobs is unbuffered: a send succeeds only where an idle runner waits for it.
	jobs    chan func()
	idleFor time.Duration
	once    sync.Once
}

// run starts f at once: on an idle runner, or on a new one.
func (r *runners) run(f func()) {
	r.once.Do(func() { r.jobs = make(chan func()) })
	select {
	case r.jobs <- f:
	default:
		go r.work(f)
	}
}

// work runs f, then what comes next, until nothing came for idleFor.
func (r *runners) work(f func()) {
	idle := time.NewTimer(r.idleFor)
	defer idle.Stop()
	for {
		f()
		f = nil // an idle runner keeps nothing of the last batch alive
		idle.Reset(r.idleFor)
		select {
		case f = <-r.jobs:
		case <-idle.C:
			return
		}
	}
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
	signer := strings.ToLower(create.GetSigner())
	if common.IsHexAddress(signer) {
		signer = strings.ToLower(common.HexToAddress(signer).Hex())
	}
	return batchKey{chain: chain, signer: signer, requestID: create.GetRequestId()}, true
}
