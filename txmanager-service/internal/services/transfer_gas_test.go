package services_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// estimator answers eth_estimateGas with a fixed estimate or error, and keeps the call.
type estimator struct {
	gas  uint64
	err  error
	call services.CallRequest
}

func (e *estimator) EstimateGas(_ context.Context, call services.CallRequest) (uint64, error) {
	e.call = call
	return e.gas, e.err
}

// A cancellation's, placeholder's or refill's transfer takes 21,000 gas where the chain
// charges that, and the node's estimate with room where it charges more (Arbitrum counts its
// L1 cost in gas and refuses 21,000).
func TestTransferGas(t *testing.T) {
	t.Parallel()
	from, to := common.HexToAddress("0x01"), common.HexToAddress("0x02")
	tests := []struct {
		name string
		est  estimator
		want uint64
	}{
		{"an Ethereum-like chain", estimator{gas: 21_000}, 21_000},
		{"a chain that folds its L1 cost into gas", estimator{gas: 450_000}, 540_000},
		{"an estimate that fails", estimator{err: errors.New("node down")}, 21_000},
		{"an estimate below a transfer's (a node's odd answer)", estimator{gas: 1}, 21_000},
	}
	for _, tc := range tests {
		got := services.TransferGas(context.Background(), &tc.est, from, to)
		if got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
		if tc.est.call.From != from || tc.est.call.To == nil || *tc.est.call.To != to || tc.est.call.Value == nil || tc.est.call.Value.Sign() != 0 {
			t.Errorf("%s: estimated %+v, want a 0-wei transfer from %s to %s", tc.name, tc.est.call, from, to)
		}
	}
}
