package txmclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// MaxBatch is the most creates the service takes in one call; CreateMany splits longer
// lists into calls of this many.
const MaxBatch = 1000

// CreateResult is one create of a CreateMany: its answer, or why it was refused.
type CreateResult struct {
	// Response is CreateTx's answer (Created false for a replay of an earlier request).
	Response *v1.CreateTxResponse
	// Err is the create's refusal as CreateTx would have returned it (v1.IsInvalidArgument,
	// v1.IsInsufficientFunds, ... and Retryable work on it).
	Err error
}

// CreateMany asks for many transactions at once, MaxBatch a call: the service runs each
// create as Create would and answers each on its own, so one refusal does not touch the
// others. A create refused for a reason that passes (NOT_LEADER, UNAVAILABLE,
// RATE_LIMITED, ...) is sent again with the next call, alone with the others that were; its
// request id makes that safe. Every create needs a request id. The results are in the order
// of reqs; the error is the context's, or a call that failed for good (then the results of
// the calls before it are kept, the rest have Err set to it).
func (c *Client) CreateMany(ctx context.Context, reqs []*v1.CreateTxRequest) ([]CreateResult, error) {
	for i, r := range reqs {
		if r.GetRequestId() == "" {
			return nil, fmt.Errorf("creates[%d]: %w", i, ErrRequestIDRequired)
		}
	}
	results := make([]CreateResult, len(reqs))
	pending := make([]int, len(reqs))
	for i := range pending {
		pending[i] = i
	}
	backoff := c.cfg.Backoff
	for round := 1; len(pending) > 0; round++ {
		var again []int
		var wait time.Duration
		for start := 0; start < len(pending); start += MaxBatch {
			part := pending[start:min(start+MaxBatch, len(pending))]
			batch := &v1.CreateTxBatchRequest{Creates: make([]*v1.CreateTxRequest, len(part))}
			for j, i := range part {
				batch.Creates[j] = reqs[i]
			}
			resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.CreateTxBatchResponse, error) {
				return n.tx.CreateTxBatch(ctx, batch)
			})
			if err != nil {
				for _, i := range pending[start:] {
					results[i] = CreateResult{Err: err}
				}
				return results, err
			}
			for j, i := range part {
				r := resp.GetResults()[j]
				if r.GetError() == nil {
					results[i] = CreateResult{Response: r.GetResponse()}
					continue
				}
				refusal := r.GetError().AsError()
				results[i] = CreateResult{Err: refusal}
				if retryable, after := Retryable(refusal); retryable && round < c.cfg.MaxAttempts {
					again = append(again, i)
					wait = max(wait, after)
				}
			}
		}
		pending = again
		if len(pending) == 0 {
			break
		}
		if wait == 0 {
			wait, backoff = backoff, min(backoff*2, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return results, ctx.Err()
		case <-time.After(wait):
		}
	}
	return results, nil
}

// WaitMany waits until every transaction in txIDs is final, at most parallel at a time
// (each wait is a long-poll, not a poll), and returns them in the order of txIDs. The
// error joins every wait that failed; the transactions of the others are there.
func (c *Client) WaitMany(ctx context.Context, txIDs []string, parallel int) ([]*v1.Tx, error) {
	parallel = max(parallel, 1)
	out := make([]*v1.Tx, len(txIDs))
	errs := make([]error, len(txIDs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(parallel, len(txIDs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if out[i], errs[i] = c.Wait(ctx, txIDs[i]); errs[i] != nil {
					errs[i] = fmt.Errorf("%s: %w", txIDs[i], errs[i])
				}
			}
		}()
	}
	for i := range txIDs {
		next <- i
	}
	close(next)
	wg.Wait()
	return out, errors.Join(errs...)
}
