package services_test

import (
	"errors"
	"math/big"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func gwei(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1_000_000_000)) }

func TestFeePolicyInitial(t *testing.T) {
	t.Parallel()
	suggestion := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)}
	tests := []struct {
		name             string
		policy           services.FeePolicy
		intent           domain.Intent
		wantFee, wantTip *big.Int
	}{
		{"from the chain", services.FeePolicy{}, domain.Intent{}, gwei(22), gwei(2)},
		{"fee cap clamps", services.FeePolicy{MaxFeeCap: gwei(15)}, domain.Intent{}, gwei(15), gwei(2)},
		{"tip cap clamps", services.FeePolicy{MaxTipCap: gwei(1)}, domain.Intent{}, gwei(21), gwei(1)},
		{"intent wins", services.FeePolicy{MaxFeeCap: gwei(15)}, domain.Intent{MaxFeePerGas: big.NewInt(1), MaxPriorityFeePerGas: big.NewInt(1)}, big.NewInt(1), big.NewInt(1)},
		{"tip never above fee", services.FeePolicy{}, domain.Intent{MaxFeePerGas: gwei(1)}, gwei(1), gwei(1)},
		{"multiplier", services.FeePolicy{BaseFeeMultiplier: 3}, domain.Intent{}, gwei(32), gwei(2)},
	}
	for _, tc := range tests {
		fee, tip, err := tc.policy.Initial(tc.intent, suggestion)
		if err != nil || fee.Cmp(tc.wantFee) != 0 || tip.Cmp(tc.wantTip) != 0 {
			t.Errorf("%s: fee %v tip %v err %v; want %v %v", tc.name, fee, tip, err, tc.wantFee, tc.wantTip)
		}
	}
}

func TestFeePolicyBump(t *testing.T) {
	t.Parallel()
	suggestion := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)}
	tests := []struct {
		name             string
		policy           services.FeePolicy
		prevFee, prevTip *big.Int
		wantFee, wantTip *big.Int
		wantErr          error
	}{
		{"12% over a healthy attempt", services.FeePolicy{}, gwei(100), gwei(10), gwei(112), new(big.Int).Mul(big.NewInt(112), big.NewInt(100_000_000)), nil},
		{"underpriced attempt jumps to market", services.FeePolicy{}, big.NewInt(1), big.NewInt(1), gwei(22), gwei(2), nil},
		{"custom bump", services.FeePolicy{BumpPercent: 50}, gwei(100), gwei(10), gwei(150), gwei(15), nil},
		{"bump below 10 is raised", services.FeePolicy{BumpPercent: 5}, gwei(100), gwei(10), gwei(112), new(big.Int).Mul(big.NewInt(112), big.NewInt(100_000_000)), nil},
		{"tiny values still rise", services.FeePolicy{}, big.NewInt(0), big.NewInt(0), gwei(22), gwei(2), nil},
		{"cap refuses", services.FeePolicy{MaxFeeCap: gwei(100)}, gwei(100), gwei(10), nil, nil, services.ErrFeeCapReached},
	}
	for _, tc := range tests {
		fee, tip, err := tc.policy.Bump(tc.prevFee, tc.prevTip, suggestion)
		if tc.wantErr != nil {
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("%s: err %v, want %v", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil || fee.Cmp(tc.wantFee) != 0 || tip.Cmp(tc.wantTip) != 0 {
			t.Errorf("%s: fee %v tip %v err %v; want %v %v", tc.name, fee, tip, err, tc.wantFee, tc.wantTip)
		}
		// Whatever the inputs, a replacement clears the node's 10% rule on both fees.
		minFee := new(big.Int).Div(new(big.Int).Mul(tc.prevFee, big.NewInt(110)), big.NewInt(100))
		minTip := new(big.Int).Div(new(big.Int).Mul(tc.prevTip, big.NewInt(110)), big.NewInt(100))
		if fee.Cmp(minFee) < 0 || tip.Cmp(minTip) < 0 {
			t.Errorf("%s: replacement %v/%v does not clear 110%% of %v/%v", tc.name, fee, tip, tc.prevFee, tc.prevTip)
		}
	}
}
