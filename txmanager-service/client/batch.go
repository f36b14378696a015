package txmclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// MaxBatch is the most creates the service takes in one call; CreateMany splits longer
// lists into calls of this many.
const MaxBatch = 1000

// maxBatchBytes bounds the creates CreateMany puts into one call at first: half the
// service's default limit on a batch (server.maxBatchBodyBytes, 8 MiB), so that creates
// carrying calldata go in more, smaller calls. A service configured below it refuses the
// call as too large, and CreateMany halves its calls until they pass.
const maxBatchBytes = 4 << 20

// maxAnswerBytes is the largest answer the client reads. Each create's answer repeats its
// transaction, calldata included: a batch's answer is larger than its request, and gRPC's
// own limit (4 MiB) would drop the answer to creates the service has made.
const maxAnswerBytes = 64 << 20

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
// RATE_LIMITED, ...) is sent again with the next call, alone with the others that were, to
// the next endpoint (a NOT_LEADER from one node is answered the same way by it again); its
// request id makes that safe. A call the service refuses as too large is sent again in
// halves, and a create too large alone is refused alone. Every create needs a request id; a create that repeats an
// earlier one of reqs (same chain, signer and request id) is refused as the service refuses
// a repeat within one batch, wherever the two fall among the calls. The results are in the
// order of reqs; the error is the context's, or a call that failed for good (then the
// results of the calls before it are kept, the rest have Err set to it).
func (c *Client) CreateMany(ctx context.Context, reqs []*v1.CreateTxRequest) ([]CreateResult, error) {
	for i, r := range reqs {
		if r.GetRequestId() == "" {
			return nil, fmt.Errorf("creates[%d]: %w", i, ErrRequestIDRequired)
		}
	}
	results := make([]CreateResult, len(reqs))
	pending := make([]int, 0, len(reqs))
	type key struct {
		chain             uint64
		signer, requestID string
	}
	first := make(map[key]int, len(reqs))
	for i, r := range reqs {
		k := key{r.GetChainId(), strings.ToLower(r.GetSigner()), r.GetRequestId()}
		if earlier, repeated := first[k]; repeated {
			results[i] = CreateResult{Err: v1.InvalidArgument(fmt.Sprintf("creates[%d].requestId", i),
				fmt.Sprintf("repeats creates[%d] (same signer and requestId); send it once", earlier))}
			continue
		}
		first[k] = i
		pending = append(pending, i)
	}
	// tries counts each create's attempts: an answer other than NOT_LEADER, or NOT_LEADER
	// from every endpoint in turn (hops counts those since its last attempt). Each round
	// starts at the next endpoint, so a create its owner refused for a reason that passes
	// tours the others again.
	tries, hops := make([]int, len(reqs)), make([]int, len(reqs))
	backoff := c.cfg.Backoff
	callBytes := maxBatchBytes
	for round := 1; len(pending) > 0; round++ {
		var again []int
		var wait time.Duration
		// touring: every create sent again was refused NOT_LEADER by an endpoint, and has
		// endpoints left to try in this attempt: the next round goes on at once, as Create
		// moves on to the next endpoint at once.
		touring := true
		for start := 0; start < len(pending); {
			part, size := nextPart(reqs, pending[start:], callBytes)
			batch := &v1.CreateTxBatchRequest{Creates: make([]*v1.CreateTxRequest, len(part))}
			for j, i := range part {
				batch.Creates[j] = reqs[i]
			}
			// Each round starts at the next endpoint: in basic routing a node answers
			// NOT_LEADER for the creates of signers it does not own, create by create, and
			// the call as a whole succeeds, so sending them to the same node again would be
			// refused the same way every round.
			resp, err := retryFrom(ctx, c, round-1, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.CreateTxBatchResponse, error) {
				return n.tx.CreateTxBatch(ctx, batch)
			})
			if err == nil && len(resp.GetResults()) != len(part) {
				err = fmt.Errorf("txmclient: %d answers to a batch of %d creates", len(resp.GetResults()), len(part))
			}
			if err != nil && tooLarge(err) {
				// The service's limit is below this call: nothing of it was made, and smaller
				// calls pass. (An answer over the client's limit was made: the smaller calls
				// replay it by request id.)
				if len(part) > 1 {
					callBytes = max(size/2, 1)
					continue
				}
				results[part[0]] = CreateResult{Err: err}
				start++
				continue
			}
			if err != nil {
				for _, i := range pending[start:] {
					results[i] = CreateResult{Err: err}
				}
				return results, err
			}
			start += len(part)
			for j, i := range part {
				r := resp.GetResults()[j]
				if r.GetError() == nil {
					results[i] = CreateResult{Response: r.GetResponse()}
					continue
				}
				refusal := r.GetError().AsError()
				results[i] = CreateResult{Err: refusal}
				// A create refused NOT_LEADER is taken to each endpoint once however few
				// attempts are allowed: in basic routing its signer's owner may be the last.
				retryable, after := Retryable(refusal)
				if hops[i]++; !v1.IsNotLeader(refusal) || hops[i] == len(c.nodes) {
					// An answer from its owner, or a whole tour of NOT_LEADER (the owner is
					// changing: a failover): an attempt, and a wait before the next.
					tries[i]++
					hops[i] = 0
					retryable = retryable && tries[i] < c.cfg.MaxAttempts
					touring = false
				}
				if retryable {
					again = append(again, i)
					wait = max(wait, after)
				}
			}
		}
		pending = again
		if len(pending) == 0 {
			break
		}
		if touring {
			continue
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

// nextPart is the longest run from the start of pending that one call takes, with its
// size: at most MaxBatch creates and maxBytes of them, and at least one.
func nextPart(reqs []*v1.CreateTxRequest, pending []int, maxBytes int) ([]int, int) {
	size := 0
	for n, i := range pending {
		next := proto.Size(reqs[i])
		if n == MaxBatch || (n > 0 && size+next > maxBytes) {
			return pending[:n], size
		}
		size += next
	}
	return pending, size
}

// tooLarge: the call was refused for its size, by the service (REQUEST_TOO_LARGE) or by
// gRPC's message limit on either side; the same call would be refused again.
func tooLarge(err error) bool {
	if v1.IsRequestTooLarge(err) {
		return true
	}
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && strings.Contains(st.Message(), "larger than max")
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
