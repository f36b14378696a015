package chain

import (
	"context"
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

func TestBlockReceiptsAreReadDirectlyOnlyFromHTTPEndpoints(t *testing.T) {
	tests := []struct {
		url  string
		want bool
	}{
		{"http://127.0.0.1:8545", true},
		{"HTTPS://rpc.example.io/v3/key", true},
		{"https://user:pass@rpc.example.io", true},
		{"ws://127.0.0.1:8546", false},
		{"wss://rpc.example.io", false},
		{"/var/run/geth.ipc", false},
		{"httpx://host", false},
	}
	for _, tc := range tests {
		t.Run(tc.url, func(t *testing.T) {
			if got := receiptsOverHTTP(tc.url, http.DefaultClient) != nil; got != tc.want {
				t.Fatalf("direct reader for %q: %v, want %v", tc.url, got, tc.want)
			}
		})
	}
}

// gethBlockReceipts is one block's eth_getBlockReceipts result shaped as geth's: n plain
// transfers.
func gethBlockReceipts(block uint64, n int) json.RawMessage {
	receipts := make([]map[string]any, n)
	for i := range receipts {
		receipts[i] = map[string]any{
			"blockHash": common.BigToHash(new(big.Int).SetUint64(block)), "blockNumber": hexutil.Uint64(block), "contractAddress": nil,
			"cumulativeGasUsed": hexutil.Uint64(21_000 * (i + 1)), "effectiveGasPrice": hexutil.Uint64(1_875_000_001),
			"from": common.BigToAddress(common.Big2), "gasUsed": hexutil.Uint64(21_000), "logs": []any{},
			"logsBloom": hexutil.Bytes(make([]byte, 256)), "status": hexutil.Uint64(1), "to": common.BigToAddress(common.Big3),
			"transactionHash": common.BigToHash(big.NewInt(int64(block)<<32 + int64(i))), "transactionIndex": hexutil.Uint64(i),
			"type": hexutil.Uint64(2),
		}
	}
	raw, err := json.Marshal(receipts)
	if err != nil {
		panic(err)
	}
	return raw
}

// BenchmarkBlockReceipts reads two blocks of 6,000 transfers' receipts (8.6 MB of JSON) from a
// local HTTP server, directly and through go-ethereum's client.
func BenchmarkBlockReceipts(b *testing.B) {
	const perBlock = 6000
	numbers := []uint64{100, 101}
	results := map[string]json.RawMessage{}
	for _, n := range numbers {
		results[hexutil.EncodeUint64(n)] = gethBlockReceipts(n, perBlock)
	}
	var answerSize int
	// Answers to a request seen before are kept: the benchmark times the reading, not the
	// node (go-ethereum's client numbers its calls anew each time, so its answers are made
	// afresh, with a copy of the results).
	var answers sync.Map
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if answer, ok := answers.Load(string(request)); ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer.([]byte)) //nolint:forcetypeassert // only []byte is stored
			return
		}
		var calls []struct {
			ID     json.RawMessage `json:"id"`
			Params []string        `json:"params"`
		}
		if err := json.Unmarshal(request, &calls); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		answer := []byte{'['}
		for i, call := range calls {
			if i > 0 {
				answer = append(answer, ',')
			}
			answer = append(append(append(append(answer, `{"jsonrpc":"2.0","id":`...), call.ID...), `,"result":`...), results[call.Params[0]]...)
			answer = append(answer, '}')
		}
		answer = append(answer, ']')
		answerSize = len(answer)
		answers.Store(string(request), answer)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	b.Cleanup(server.Close)
	ctx := context.Background()

	direct := &RPCChain{blockReceipts: receiptsOverHTTP(server.URL, server.Client())}
	client, err := rpc.DialOptions(ctx, server.URL, rpc.WithHTTPClient(server.Client()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	viaClient := &RPCChain{rpcClient: client}
	for _, path := range []struct {
		name  string
		chain *RPCChain
	}{{"direct", direct}, {"go-ethereum-client", viaClient}} {
		b.Run(path.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				decoded, errs, err := path.chain.fetchBlockReceipts(ctx, numbers)
				if err != nil || errs[0] != nil || errs[1] != nil {
					b.Fatal(err, errs)
				}
				if len(decoded[0]) != perBlock || len(decoded[1]) != perBlock {
					b.Fatalf("read %d and %d receipts", len(decoded[0]), len(decoded[1]))
				}
			}
			b.SetBytes(int64(answerSize))
		})
	}
}

// A block's receipts answer runs to megabytes. The buffer it is read into is kept between
// polls, also across garbage collections (a sync.Pool empties at every other one), so a
// poll after a collection does not grow a new buffer to the answer's size again.
func TestBlockReceiptsKeepTheirReadBufferThroughCollections(t *testing.T) {
	answer := []byte(`[{"jsonrpc":"2.0","id":0,"result":` + string(gethBlockReceipts(100, 3000)) + `}]`)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	}))
	t.Cleanup(server.Close)
	reader := receiptsOverHTTP(server.URL, server.Client())
	allocatedByPoll := func() uint64 {
		runtime.GC()
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		receipts, errs, err := reader.fetch(context.Background(), []uint64{100})
		runtime.ReadMemStats(&after)
		if err != nil || errs[0] != nil || len(receipts[0]) != 3000 {
			t.Fatalf("poll: %v %v, %d receipts", err, errs, len(receipts[0]))
		}
		return after.TotalAlloc - before.TotalAlloc
	}
	first := allocatedByPoll()
	for range 3 {
		// The first poll grew a buffer to the answer's size (about twice that in all, as it
		// doubles); a later one reuses it and allocates at least the answer's size less.
		if later := allocatedByPoll(); later+uint64(len(answer)) > first {
			t.Fatalf("a poll after two collections allocated %d bytes, the first %d: the %d-byte read buffer was not kept", later, first, len(answer))
		}
	}
}
