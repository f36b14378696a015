package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// sendRecorder is a JSON-RPC proxy in front of a node that records every
// eth_sendRawTransaction call (the nonces it carries, in order), how many were in flight at
// once, and holds the first one until released.
type sendRecorder struct {
	upstream string
	server   *httptest.Server
	held     chan struct{} // closed when the first send arrives
	release  chan struct{}

	mu          sync.Mutex
	calls       [][]uint64
	inFlight    int
	maxInFlight int
}

func newSendRecorder(t *testing.T, upstream string) *sendRecorder {
	r := &sendRecorder{upstream: upstream, held: make(chan struct{}), release: make(chan struct{})}
	r.server = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		r.releaseFirst()
		r.server.Close()
	})
	return r
}

func (r *sendRecorder) releaseFirst() {
	select {
	case <-r.release:
	default:
		close(r.release)
	}
}

func (r *sendRecorder) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if nonces := sentNonces(body); nonces != nil {
		r.mu.Lock()
		first := len(r.calls) == 0
		r.calls = append(r.calls, nonces)
		r.inFlight++
		r.maxInFlight = max(r.maxInFlight, r.inFlight)
		r.mu.Unlock()
		defer func() {
			r.mu.Lock()
			r.inFlight--
			r.mu.Unlock()
		}()
		if first {
			close(r.held)
			<-r.release
		}
	}
	resp, err := http.Post(r.upstream, "application/json", bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// sentNonces is the nonces of the transactions a JSON-RPC request (single or batch) sends
// with eth_sendRawTransaction, nil when it sends none.
func sentNonces(body []byte) []uint64 {
	type call struct {
		Method string            `json:"method"`
		Params []json.RawMessage `json:"params"`
	}
	var calls []call
	if err := json.Unmarshal(body, &calls); err != nil {
		var one call
		if json.Unmarshal(body, &one) != nil {
			return nil
		}
		calls = []call{one}
	}
	var nonces []uint64
	for _, c := range calls {
		if c.Method != "eth_sendRawTransaction" || len(c.Params) == 0 {
			continue
		}
		var raw hexutil.Bytes
		var tx types.Transaction
		if json.Unmarshal(c.Params[0], &raw) == nil && tx.UnmarshalBinary(raw) == nil {
			nonces = append(nonces, tx.Nonce())
		}
	}
	return nonces
}

// overlapTransactions transactions of one signer wait ALLOCATED, to be sent in batches of
// overlapBatch.
const overlapTransactions, overlapBatch = 64, 16

// heldSecondBatch allocates overlapTransactions with the pipeline off, then starts a node
// whose chain calls pass through a sendRecorder holding the first send, and waits until
// that send is held and the batch after it is stored. Neither node rebroadcasts (10
// minutes, slowOverlapResubmit): every send in the record is a first one. It returns the
// chain, the database, the recorder and the sending node.
func heldSecondBatch(t *testing.T) (sim *chain.SimulatedChain, dsn string, recorder *sendRecorder, s *testService) {
	t.Helper()
	sim = newTestChain(t, 250*time.Millisecond)
	dsn = testsupport.MigratedDSN(t)
	signer, to := devAddress(t, 0), devAddress(t, 5)
	// Allocated first, with the pipeline off: the pipeline then finds them all waiting.
	creator := startService(t, serviceOptions{chain: sim, dsn: dsn, configure: func(bc *conf.Bootstrap) { bc.Pipeline.Enabled = false }})
	for i := range overlapTransactions {
		creator.createOK(t, map[string]any{"signer": signer, "to": to, "value": fmt.Sprint(i + 1), "gasLimit": 21000})
	}
	creator.stop(t)

	recorder = newSendRecorder(t, sim.HTTPEndpoint())
	s = startService(t, serviceOptions{chain: sim, dsn: dsn, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		slowOverlapResubmit(bc)
		bc.Chain.RPCURL = recorder.server.URL
	}})
	select {
	case <-recorder.held:
	case <-time.After(30 * time.Second):
		t.Fatal("no transaction was sent within 30s")
	}
	// While the first batch is held on its way, the next one is signed and stored.
	waitFor(t, 10*time.Second, "the next batch stored while the first is being sent", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE state = 'TRACKING'") >= 2*overlapBatch
	})
	return sim, dsn, recorder, s
}

// slowOverlapResubmit sends in batches of overlapBatch and never rebroadcasts in a test's time.
func slowOverlapResubmit(bc *conf.Bootstrap) {
	bc.Pipeline.SubmitBatch = overlapBatch
	bc.Resubmit.Interval = conf.Duration(10 * time.Minute)
}

// A hot signer's next batch is signed and stored while the batch before it is on its way
// to the node, and the sends themselves stay one at a time, in nonce order.
func TestNextBatchIsStoredWhileOneIsSent(t *testing.T) {
	t.Parallel()
	_, _, recorder, s := heldSecondBatch(t)
	recorder.mu.Lock()
	sendsWhileHeld := len(recorder.calls)
	recorder.mu.Unlock()
	if sendsWhileHeld != 1 {
		t.Fatalf("%d sends while the first was held, want 1: sends must wait for the one before", sendsWhileHeld)
	}
	recorder.releaseFirst()
	waitFor(t, 60*time.Second, "every transaction confirmed", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'") == overlapTransactions
	})

	recorder.mu.Lock()
	defer recorder.mu.Unlock()
	if recorder.maxInFlight != 1 {
		t.Errorf("%d sends in flight at once, want 1", recorder.maxInFlight)
	}
	var sent []uint64
	for _, call := range recorder.calls {
		sent = append(sent, call...)
	}
	if len(sent) != overlapTransactions || len(recorder.calls) < overlapTransactions/overlapBatch {
		t.Fatalf("%d transactions sent in %d calls, want %d in at least %d", len(sent), len(recorder.calls), overlapTransactions, overlapTransactions/overlapBatch)
	}
	for i, nonce := range sent {
		if nonce != uint64(i) {
			t.Fatalf("send %d carried nonce %d: sends out of nonce order (%v)", i, nonce, sent)
		}
	}
	t.Logf("%d transactions in %d sends, one at a time, nonces 0..%d in order", len(sent), len(recorder.calls), len(sent)-1)
}

// A batch that is stored goes out even when the node stops while the batch before it is
// on its way: its bytes are on record, and leaving it unsent would hold every later nonce
// up until its resubmission (10 minutes here).
func TestStoredBatchGoesOutWhenTheNodeStops(t *testing.T) {
	t.Parallel()
	sim, dsn, recorder, s := heldSecondBatch(t)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.stop(t)
	}()
	time.Sleep(300 * time.Millisecond) // the stop has begun with the first send still held
	recorder.releaseFirst()
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop within 60s")
	}
	recorder.mu.Lock()
	sends := len(recorder.calls)
	recorder.mu.Unlock()
	if sends < 2 {
		t.Fatalf("%d sends by the stopping node, want the held batch and the stored one after it", sends)
	}

	next := startService(t, serviceOptions{chain: sim, dsn: dsn, fastPipeline: true, configure: slowOverlapResubmit})
	waitFor(t, 60*time.Second, "every transaction confirmed under the next owner, without waiting for resubmission", func() bool {
		return next.count(t, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'") == overlapTransactions
	})
}
