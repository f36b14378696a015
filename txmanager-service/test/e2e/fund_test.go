package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
)

func TestWaitReceipt(t *testing.T) {
	t.Parallel()
	hash := common.HexToHash("0xabc")
	receipt, err := json.Marshal(&types.Receipt{Status: types.ReceiptStatusSuccessful, TxHash: hash, Logs: []*types.Log{}})
	if err != nil {
		t.Fatal(err)
	}
	const (
		notFound = `null`
		indexing = `{"code":-32000,"message":"transaction indexing is in progress","data":"transaction indexing is in progress"}`
		other    = `{"code":-32000,"message":"something else broke"}`
	)
	tests := []struct {
		name    string
		answers []string // results, or errors when they have a code, in order; the last repeats
		wantErr string   // "" means the receipt is returned
	}{
		{name: "mined at once", answers: []string{string(receipt)}},
		{name: "not found, then mined", answers: []string{notFound, notFound, string(receipt)}},
		{name: "index still building, then mined", answers: []string{indexing, indexing, notFound, string(receipt)}},
		{name: "another error ends the wait", answers: []string{indexing, other}, wantErr: "something else broke"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			node := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var req struct {
					ID json.RawMessage `json:"id"`
				}
				_ = json.NewDecoder(r.Body).Decode(&req)
				answer := tt.answers[min(int(calls.Add(1))-1, len(tt.answers)-1)]
				field := "result"
				if strings.Contains(answer, `"code"`) {
					field = "error"
				}
				w.Header().Set("Content-Type", "application/json")
				_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":` + string(req.ID) + `,"` + field + `":` + answer + `}`))
			}))
			t.Cleanup(node.Close)
			eth, err := ethclient.Dial(node.URL)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(eth.Close)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			defer cancel()
			got, err := WaitReceipt(ctx, eth, hash)
			switch {
			case tt.wantErr == "" && (err != nil || got.TxHash != hash):
				t.Errorf("WaitReceipt = %v, %v; want the receipt of %s", got, err, hash)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}
