package chain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// nodeBehind puts geth's own HTTP server behind a proxy that may rewrite its answers.
func nodeBehind(t *testing.T, endpoint string, rewrite func(request, answer []byte) (int, []byte)) string {
	t.Helper()
	node, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(node)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(request))
		recorded := httptest.NewRecorder()
		proxy.ServeHTTP(recorded, r)
		status, answer := recorded.Code, recorded.Body.Bytes()
		if rewrite != nil {
			status, answer = rewrite(request, answer)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(server.Close)
	return server.URL
}

// dialBehind dials the node at endpoint through nodeBehind's proxy.
func dialBehind(t *testing.T, endpoint string, rewrite func(request, answer []byte) (int, []byte)) *chain.RPCChain {
	t.Helper()
	remote, err := chain.DialRPC(testContext(t), nodeBehind(t, endpoint, rewrite))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remote.Close)
	return remote
}

// reversed answers a batch in reverse order, as JSON-RPC allows.
func reversed(_, answer []byte) (int, []byte) {
	var elems []json.RawMessage
	if err := json.Unmarshal(answer, &elems); err != nil {
		return http.StatusOK, answer
	}
	slices.Reverse(elems)
	out, _ := json.Marshal(elems)
	return http.StatusOK, out
}

// TestBlockReceiptsOverHTTPReadTheSameAsTheClient: the receipts an HTTP endpoint's answer
// is read into directly are the ones go-ethereum's client reads from the same node, for
// blocks with transfers, an empty block and one not mined yet, in order or not.
func TestBlockReceiptsOverHTTPReadTheSameAsTheClient(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 2, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	keys := sim.DevKeys()
	headOf := func() uint64 {
		t.Helper()
		latest, err := sim.LatestHeader(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return latest.Number
	}
	first := headOf() + 1
	const sent = 3 * 7 * 2
	var nonce uint64
	for range 3 {
		for range 7 {
			for _, key := range keys {
				_, raw := transfer(t, sim, key, nonce)
				sendRaw(t, ctx, sim, raw)
			}
			nonce++
		}
		sim.Commit()
	}
	// A transfer the pool took in late goes into a later block: seal until all are mined, so
	// the next block is empty.
	mined := func() int {
		var blocks []uint64
		for n := first; n <= headOf(); n++ {
			blocks = append(blocks, n)
		}
		got, err := sim.BlockReceipts(ctx, blocks)
		if err != nil {
			t.Fatal(err)
		}
		total := 0
		for _, b := range got {
			total += len(b)
		}
		return total
	}
	for tries := 0; mined() < sent; tries++ {
		if tries == 20 {
			t.Fatalf("%d of %d transfers mined", mined(), sent)
		}
		sim.Commit()
	}
	sim.Commit() // an empty block
	head := headOf()
	var blocks []uint64
	for n := first; n <= head+1; n++ {
		blocks = append(blocks, n)
	}
	want, err := sim.BlockReceipts(ctx, blocks) // the in-process client
	if err != nil {
		t.Fatalf("BlockReceipts through the client: %v", err)
	}
	empty, above := want[len(want)-2], want[len(want)-1]
	if len(want[0]) == 0 || empty == nil || len(empty) != 0 || above != nil {
		t.Fatalf("the client read %d receipts in the first block, %d in the last (nil: %v), nil above the head: %v; want some, none (not nil) and nil",
			len(want[0]), len(empty), empty == nil, above == nil)
	}

	tests := []struct {
		name    string
		rewrite func(request, answer []byte) (int, []byte)
	}{
		{"answered in order", nil},
		{"answered in reverse order", reversed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			remote := dialBehind(t, sim.HTTPEndpoint(), tc.rewrite)
			got, err := remote.BlockReceipts(ctx, blocks)
			if err != nil {
				t.Fatalf("BlockReceipts over HTTP: %v", err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("over HTTP:\n%+v\nthrough the client:\n%+v", got, want)
			}
			// Batches of up to 8 blocks (blockReceiptsPerBatch).
			if n, want := remote.RequestCount(), int64((len(blocks)+7)/8); n != want {
				t.Fatalf("requests = %d, want %d batches for %d blocks", n, want, len(blocks))
			}
		})
	}
}

// TestBlockReceiptsOverHTTPFailLikeTheClient: what the service decides from a failure (try
// another endpoint, or read receipts by hash from now on) is decided the same way on the
// direct path: a non-2xx answer is an rpc.HTTPError, a node without the method answers
// ErrNotSupported, a missing or garbled answer is an error.
func TestBlockReceiptsOverHTTPFailLikeTheClient(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	sim.Commit()
	tests := []struct {
		name    string
		rewrite func(request, answer []byte) (int, []byte)
		check   func(error) bool
	}{
		{"503 from a gateway", func(_, _ []byte) (int, []byte) { return http.StatusServiceUnavailable, []byte("busy") },
			func(err error) bool {
				var httpErr rpc.HTTPError
				return errors.As(err, &httpErr) && httpErr.StatusCode == http.StatusServiceUnavailable
			}},
		{"method not found per call", func(_, _ []byte) (int, []byte) {
			return http.StatusOK, []byte(`[{"jsonrpc":"2.0","id":0,"error":{"code":-32601,"message":"the method eth_getBlockReceipts does not exist/is not available"}},` +
				`{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"the method eth_getBlockReceipts does not exist/is not available"}}]`)
		}, func(err error) bool { return errors.Is(err, services.ErrNotSupported) }},
		{"another error per call", func(_, _ []byte) (int, []byte) {
			return http.StatusOK, []byte(`[{"jsonrpc":"2.0","id":0,"result":[]},{"jsonrpc":"2.0","id":1,"error":{"code":-32000,"message":"header not found"}}]`)
		}, func(err error) bool {
			var rpcErr rpc.Error
			return errors.As(err, &rpcErr) && rpcErr.ErrorCode() == -32000 && !errors.Is(err, services.ErrNotSupported)
		}},
		{"one call unanswered", func(_, _ []byte) (int, []byte) {
			return http.StatusOK, []byte(`[{"jsonrpc":"2.0","id":1,"result":null}]`)
		}, func(err error) bool { return err != nil && !errors.Is(err, services.ErrNotSupported) }},
		{"the whole batch refused", func(_, _ []byte) (int, []byte) {
			return http.StatusOK, []byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"batch too large"}}`)
		}, func(err error) bool {
			var rpcErr rpc.Error
			return errors.As(err, &rpcErr) && rpcErr.ErrorCode() == -32600
		}},
		{"garbled", func(_, answer []byte) (int, []byte) { return http.StatusOK, answer[:len(answer)/2] },
			func(err error) bool { return err != nil }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			remote := dialBehind(t, sim.HTTPEndpoint(), tc.rewrite)
			got, err := remote.BlockReceipts(ctx, []uint64{0, 1})
			if !tc.check(err) {
				t.Fatalf("BlockReceipts = %v, %v: not the failure wanted", got, err)
			}
		})
	}
}
