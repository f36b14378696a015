package chain_test

import (
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// The simulated chain supports everything, so the "node lacks this" paths are exercised
// against minimal JSON-RPC servers that answer the way older or non-geth nodes do.

type codedError struct {
	message string
	code    int
}

func (e codedError) Error() string  { return e.message }
func (e codedError) ErrorCode() int { return e.code }

// fakeEth serves eth_getBlockByNumber: "latest" from latest, "finalized" from finalized
// or finalizedErr.
type fakeEth struct {
	latest       map[string]any
	finalized    map[string]any
	finalizedErr error
}

func (f *fakeEth) GetBlockByNumber(tag string, _ bool) (map[string]any, error) {
	switch tag {
	case "latest":
		return f.latest, nil
	case "finalized":
		return f.finalized, f.finalizedErr
	}
	return nil, nil
}

// fakeEthWithTip adds eth_maxPriorityFeePerGas, which fakeEth alone lacks.
type fakeEthWithTip struct {
	*fakeEth
	tip    *big.Int
	tipErr error
}

func (f *fakeEthWithTip) MaxPriorityFeePerGas() (*hexutil.Big, error) {
	return (*hexutil.Big)(f.tip), f.tipErr
}

// fakeLegacyEth is a node of a chain without EIP-1559 that answers eth_gasPrice.
type fakeLegacyEth struct {
	*fakeEth
	gasPrice *big.Int
}

func (f *fakeLegacyEth) GasPrice() (*hexutil.Big, error) { return (*hexutil.Big)(f.gasPrice), nil }

func fakeBlock(number uint64, baseFee *big.Int) map[string]any {
	block := map[string]any{
		"number":     hexutil.Uint64(number),
		"hash":       "0x00000000000000000000000000000000000000000000000000000000000000aa",
		"parentHash": "0x00000000000000000000000000000000000000000000000000000000000000bb",
		"timestamp":  hexutil.Uint64(1_700_000_000),
	}
	if baseFee != nil {
		block["baseFeePerGas"] = (*hexutil.Big)(baseFee)
	}
	return block
}

func fakeNode(t *testing.T, service any) *chain.RPCChain {
	t.Helper()
	server := rpc.NewServer()
	if err := server.RegisterName("eth", service); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(server.Stop)
	adapter := chain.NewRPCChain(rpc.DialInProc(server))
	t.Cleanup(adapter.Close)
	return adapter
}

func TestFinalizedHeaderOnNodesWithoutTheTag(t *testing.T) {
	tests := []struct {
		name             string
		node             *fakeEth
		wantNotSupported bool
		wantNumber       uint64
	}{
		{name: "pre-merge geth", node: &fakeEth{finalizedErr: errors.New("finalized block not found")}, wantNotSupported: true},
		{name: "unknown block code", node: &fakeEth{finalizedErr: codedError{"Unknown block", -39001}}, wantNotSupported: true},
		{name: "tag not understood", node: &fakeEth{finalizedErr: codedError{"invalid argument 0: hex string without 0x prefix", -32602}}, wantNotSupported: true},
		{name: "null result", node: &fakeEth{}, wantNotSupported: true},
		{name: "unrelated failure", node: &fakeEth{finalizedErr: errors.New("database closed")}, wantNotSupported: false},
		{name: "supported", node: &fakeEth{finalized: fakeBlock(64, big.NewInt(7))}, wantNumber: 64},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			header, err := fakeNode(t, tc.node).FinalizedHeader(ctx)
			if tc.node.finalized != nil {
				if err != nil || header.Number != tc.wantNumber {
					t.Fatalf("FinalizedHeader = %+v, %v; want height %d", header, err, tc.wantNumber)
				}
				return
			}
			if err == nil {
				t.Fatalf("FinalizedHeader = %+v, want an error", header)
			}
			if got := errors.Is(err, services.ErrNotSupported); got != tc.wantNotSupported {
				t.Errorf("errors.Is(%v, ErrNotSupported) = %v, want %v", err, got, tc.wantNotSupported)
			}
		})
	}
}

func TestFinalizedHeaderTransportErrorIsNotNotSupported(t *testing.T) {
	server := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(server.Close)
	ctx := testContext(t)
	adapter, err := chain.DialRPC(ctx, server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adapter.Close)

	_, err = adapter.FinalizedHeader(ctx)
	if err == nil || errors.Is(err, services.ErrNotSupported) {
		t.Errorf("HTTP 404 gave %v, want a plain transport error", err)
	}
}

func TestSuggestFeesAcrossNodeCapabilities(t *testing.T) {
	baseFee := big.NewInt(30 * params.GWei)
	tests := []struct {
		name             string
		service          any
		wantTip          *big.Int
		wantNotSupported bool
	}{
		{
			name:    "node suggests a tip",
			service: &fakeEthWithTip{fakeEth: &fakeEth{latest: fakeBlock(9, baseFee)}, tip: big.NewInt(2 * params.GWei)},
			wantTip: big.NewInt(2 * params.GWei),
		},
		{
			name:    "node lacks eth_maxPriorityFeePerGas",
			service: &fakeEth{latest: fakeBlock(9, baseFee)},
			wantTip: big.NewInt(params.GWei),
		},
		{
			name:    "tip look-up fails for another reason",
			service: &fakeEthWithTip{fakeEth: &fakeEth{latest: fakeBlock(9, baseFee)}, tipErr: errors.New("oracle exploded")},
		},
		{
			name:    "chain without EIP-1559 and without eth_gasPrice",
			service: &fakeEth{latest: fakeBlock(9, nil)},
		},
	}
	t.Run("chain without EIP-1559: the gas price, for legacy transactions", func(t *testing.T) {
		fees, err := fakeNode(t, &fakeLegacyEth{fakeEth: &fakeEth{latest: fakeBlock(9, nil)}, gasPrice: big.NewInt(7 * params.GWei)}).SuggestFees(testContext(t))
		if err != nil || !fees.Legacy || fees.GasPrice.Cmp(big.NewInt(7*params.GWei)) != 0 || fees.BaseFee != nil {
			t.Fatalf("SuggestFees = %+v, %v; want legacy at 7 gwei", fees, err)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fees, err := fakeNode(t, tc.service).SuggestFees(testContext(t))
			if tc.wantTip == nil {
				if err == nil {
					t.Fatalf("SuggestFees = %+v, want an error", fees)
				}
				if got := errors.Is(err, services.ErrNotSupported); got != tc.wantNotSupported {
					t.Errorf("errors.Is(%v, ErrNotSupported) = %v, want %v", err, got, tc.wantNotSupported)
				}
				return
			}
			if err != nil {
				t.Fatalf("SuggestFees: %v", err)
			}
			if fees.BaseFee.Cmp(baseFee) != 0 || fees.TipCap.Cmp(tc.wantTip) != 0 {
				t.Errorf("SuggestFees = base %s tip %s, want base %s tip %s", fees.BaseFee, fees.TipCap, baseFee, tc.wantTip)
			}
		})
	}
}

// fakeEthWithHeaders also answers eth_getHeaderByNumber, as geth, Erigon and reth do.
type fakeEthWithHeaders struct {
	*fakeEth
	headerCalls int
}

func (f *fakeEthWithHeaders) GetHeaderByNumber(tag string) (map[string]any, error) {
	f.headerCalls++
	return f.GetBlockByNumber(tag, false)
}

// TestHeadersFallBackToBlocksOnNodesWithoutTheHeaderMethod: a node that does not know
// eth_getHeaderByNumber costs one refused request, once; from then on the endpoint is asked
// with eth_getBlockByNumber. A node that knows it is never asked the other way, and a
// header it cannot give (no finalized block) does not make the endpoint switch.
func TestHeadersFallBackToBlocksOnNodesWithoutTheHeaderMethod(t *testing.T) {
	block := fakeBlock(9, big.NewInt(7))
	tests := []struct {
		name string
		node any
		// wantRequests: the requests of each LatestHeader call, then FinalizedHeader's,
		// then LatestHeader's once more.
		wantRequests []int64
	}{
		{name: "node without the method", node: &fakeEth{latest: block, finalizedErr: codedError{"Unknown block", -39001}},
			wantRequests: []int64{2, 1, 1, 1}},
		{name: "node with the method", node: &fakeEthWithHeaders{fakeEth: &fakeEth{latest: block, finalizedErr: codedError{"Unknown block", -39001}}},
			wantRequests: []int64{1, 1, 1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			node := fakeNode(t, tc.node)
			var got []int64
			before := node.RequestCount()
			step := func() {
				got = append(got, node.RequestCount()-before)
				before = node.RequestCount()
			}
			for range 2 {
				header, err := node.LatestHeader(ctx)
				if err != nil || header.Number != 9 {
					t.Fatalf("LatestHeader = %+v, %v; want height 9", header, err)
				}
				step()
			}
			if _, err := node.FinalizedHeader(ctx); !errors.Is(err, services.ErrNotSupported) {
				t.Fatalf("FinalizedHeader error %v, want ErrNotSupported", err)
			}
			step()
			if _, err := node.LatestHeader(ctx); err != nil {
				t.Fatalf("LatestHeader after FinalizedHeader: %v", err)
			}
			step()
			if !slices.Equal(got, tc.wantRequests) {
				t.Errorf("requests per call %v, want %v", got, tc.wantRequests)
			}
			if withHeaders, ok := tc.node.(*fakeEthWithHeaders); ok && withHeaders.headerCalls != 4 {
				t.Errorf("eth_getHeaderByNumber answered %d calls, want all 4", withHeaders.headerCalls)
			}
		})
	}
}
