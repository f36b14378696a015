package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// loadRecord is what the clients saw: every create they attempted and every answer that
// acknowledged one (a txId), which the checker must find in the database afterwards.
//
// A signer's nonces and request ids are its own on each chain, so every key that is per
// signer is per chain and signer (laneKey), with the chain the answer named.
type loadRecord struct {
	mu           sync.Mutex
	attempted    int
	acknowledged map[string]time.Time // tx id -> when first acknowledged
	ackedChain   map[string]uint64    // tx id -> the chain its acknowledgement named
	byRequest    map[string]string    // chain/signer/requestId -> tx id
	failed       map[string]int       // reason -> count, for creates never acknowledged
	replays      int
	replayDiffs  int // a replay answered with another tx id than the original
	// otherChain counts creates that named a chain and were acknowledged on another.
	otherChain int
	errorsSeen map[string]int
	// nonceHolders is every tx id acknowledged with a signer's nonce on a chain
	// ("chain/signer/nonce"): two ids for one nonce means a nonce was given out twice.
	nonceHolders map[string][]string
	// keyed are the acknowledged creates that carried a requestId, for replays later.
	keyed []ackedRequest
	// ackSigner is the signer of each acknowledged tx id.
	ackSigner map[string]string
}

type ackedRequest struct {
	req  *v1.CreateTxRequest
	txID string
	at   time.Time
}

func newLoadRecord() *loadRecord {
	return &loadRecord{
		acknowledged: map[string]time.Time{}, ackedChain: map[string]uint64{}, byRequest: map[string]string{},
		failed: map[string]int{}, errorsSeen: map[string]int{}, nonceHolders: map[string][]string{}, ackSigner: map[string]string{},
	}
}

// laneKey names a signer on a chain: the scope of its nonces and request ids.
func laneKey(chainID uint64, signer string) string { return fmt.Sprintf("%d/%s", chainID, signer) }

// ackedOn is the acknowledged tx ids per chain their acknowledgement named.
func (rec *loadRecord) ackedOn() map[uint64][]string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	out := map[uint64][]string{}
	for id := range rec.acknowledged {
		out[rec.ackedChain[id]] = append(out[rec.ackedChain[id]], id)
	}
	return out
}

type loadOptions struct {
	targets []*e2e.Client // one per node
	signers []common.Address
	// chains are the chain ids creates are spread over, each create naming one; empty:
	// creates name no chain (a single-chain deployment).
	chains   []uint64
	clients  int
	duration time.Duration
	seed     uint64
	// stop, when set, ends the load instead of duration.
	stop <-chan struct{}
	// tagData gives every request data of its own (retries and replays carry the same), so
	// the chain shows whether one request was executed twice; it needs gasLimit above 21,000.
	tagData  bool
	gasLimit uint64
}

// runLoad sends creates for random signers on random chains to random nodes until duration
// passes. Half carry a requestId; those are retried (on another node) after a failure, and some are
// sent again after success to check the replay answers with the same transaction.
func runLoad(ctx context.Context, o loadOptions, rec *loadRecord) {
	deadline := time.Now().Add(o.duration)
	running := func() bool {
		if o.stop != nil {
			select {
			case <-o.stop:
				return false
			default:
				return ctx.Err() == nil
			}
		}
		return time.Now().Before(deadline) && ctx.Err() == nil
	}
	gasLimit := o.gasLimit
	if gasLimit == 0 {
		gasLimit = 21_000
	}
	var wg sync.WaitGroup
	for c := range o.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(o.seed, uint64(c)+1))
			for n := 0; running(); n++ {
				req := &v1.CreateTxRequest{
					Signer:   o.signers[r.IntN(len(o.signers))].Hex(),
					To:       e2e.Recipient().Hex(),
					Value:    fmt.Sprint(1 + r.IntN(1_000_000)),
					GasLimit: gasLimit,
				}
				if len(o.chains) > 0 {
					req.ChainId = o.chains[r.IntN(len(o.chains))]
				}
				if o.tagData {
					req.Data = fmt.Sprintf("0x%016x", r.Uint64())
				}
				if r.IntN(2) == 0 {
					req.RequestId = fmt.Sprintf("chaos-%d-%d-%d", o.seed, c, n)
				}
				rec.create(ctx, o.targets, r, req)
				time.Sleep(time.Duration(r.IntN(20)) * time.Millisecond)
			}
		}()
	}
	wg.Wait()
}

// create sends req until it is acknowledged (reported true), or a definite answer or the
// retries run out.
func (rec *loadRecord) create(ctx context.Context, clients []*e2e.Client, r *rand.Rand, req *v1.CreateTxRequest) bool {
	rec.mu.Lock()
	rec.attempted++
	rec.mu.Unlock()
	tries := 1
	if req.RequestId != "" {
		tries = 6 // only an idempotent create is safe to send again after an unclear failure
	}
	var lastErr error
	for try := range tries {
		resp, err := clients[r.IntN(len(clients))].CreateTx(ctx, req)
		if err == nil {
			rec.acked(req, resp)
			if req.RequestId != "" && r.IntN(5) == 0 {
				rec.replay(ctx, clients[r.IntN(len(clients))], req, resp.GetTx().GetTxId())
			}
			return true
		}
		lastErr = err
		rec.sawError(err)
		var apiErr *e2e.APIError
		if errors.As(err, &apiErr) && !apiErr.Retryable() && apiErr.Reason != "FENCED" {
			break // a definite answer (validation, conflict): retrying cannot change it
		}
		time.Sleep(time.Duration(200*(try+1)) * time.Millisecond)
	}
	rec.mu.Lock()
	rec.failed[reasonOf(lastErr)]++
	rec.mu.Unlock()
	return false
}

func (rec *loadRecord) acked(req *v1.CreateTxRequest, resp *v1.CreateTxResponse) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	id, chainID := resp.GetTx().GetTxId(), resp.GetTx().GetChainId()
	now := time.Now()
	if _, seen := rec.acknowledged[id]; !seen {
		rec.acknowledged[id] = now
		rec.ackedChain[id] = chainID
		rec.ackSigner[id] = req.Signer
	}
	if req.GetChainId() != 0 && chainID != req.GetChainId() {
		rec.otherChain++
	}
	lane := laneKey(chainID, req.Signer)
	nonceKey := fmt.Sprintf("%s/%d", lane, resp.GetTx().GetNonce())
	if !slices.Contains(rec.nonceHolders[nonceKey], id) {
		rec.nonceHolders[nonceKey] = append(rec.nonceHolders[nonceKey], id)
	}
	if req.RequestId != "" && resp.GetCreated() {
		rec.keyed = append(rec.keyed, ackedRequest{req: req, txID: id, at: now})
	}
	if req.RequestId != "" {
		key := lane + "/" + req.RequestId
		if earlier, ok := rec.byRequest[key]; ok && earlier != id {
			rec.replayDiffs++
		}
		rec.byRequest[key] = id
	}
}

// replay sends req again as it was, so on the same chain as the original: the answer must
// be the original transaction.
func (rec *loadRecord) replay(ctx context.Context, client *e2e.Client, req *v1.CreateTxRequest, want string) {
	resp, err := client.CreateTx(ctx, req)
	if err != nil {
		rec.sawError(err)
		return
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.replays++
	if resp.GetTx().GetTxId() != want {
		rec.replayDiffs++
	}
}

func (rec *loadRecord) sawError(err error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.errorsSeen[reasonOf(err)]++
}

func reasonOf(err error) string {
	var apiErr *e2e.APIError
	if errors.As(err, &apiErr) {
		return fmt.Sprintf("%d %s", apiErr.Status, apiErr.Reason)
	}
	if err == nil {
		return "none"
	}
	return "transport error"
}
