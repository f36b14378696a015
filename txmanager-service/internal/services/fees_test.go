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
		{"minimum tip lifts the node's suggestion", services.FeePolicy{MinTip: gwei(30)}, domain.Intent{}, gwei(50), gwei(30)},
		{"minimum tip below the suggestion changes nothing", services.FeePolicy{MinTip: gwei(1)}, domain.Intent{}, gwei(22), gwei(2)},
		{"tip cap wins over the minimum", services.FeePolicy{MinTip: gwei(30), MaxTipCap: gwei(5)}, domain.Intent{}, gwei(25), gwei(5)},
		{"the intent's own tip wins over the minimum", services.FeePolicy{MinTip: gwei(30)}, domain.Intent{MaxPriorityFeePerGas: gwei(1)}, gwei(21), gwei(1)},
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

func TestFeePolicyReprice(t *testing.T) {
	t.Parallel()
	calm := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)}   // fresh: 22 / 2
	spiked := services.FeeSuggestion{BaseFee: gwei(80), TipCap: gwei(5)} // fresh: 165 / 5
	legacy := services.FeeSuggestion{Legacy: true, GasPrice: gwei(30)}   // fresh: 30 / 30
	tests := []struct {
		name             string
		policy           services.FeePolicy
		s                services.FeeSuggestion
		prevFee, prevTip *big.Int
		wantAction       services.RepriceAction
		wantFee, wantTip *big.Int
	}{
		{"priced at market: same bytes", services.FeePolicy{}, calm, gwei(22), gwei(2), services.KeepFees, gwei(22), gwei(2)},
		{"above market: same bytes", services.FeePolicy{}, calm, gwei(50), gwei(3), services.KeepFees, gwei(50), gwei(3)},
		{"base fee spiked: jump to market", services.FeePolicy{}, spiked, gwei(22), gwei(2), services.RaiseFees, gwei(165), gwei(5)},
		{"tips rose: at least the bump on both", services.FeePolicy{}, services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(3)}, gwei(40), gwei(2), services.RaiseFees, big.NewInt(44_800_000_000), gwei(3)},
		{"cap limits the jump", services.FeePolicy{MaxFeeCap: gwei(100)}, spiked, gwei(22), gwei(2), services.RaiseFees, gwei(100), gwei(5)},
		{"cap leaves no valid replacement", services.FeePolicy{MaxFeeCap: gwei(100)}, spiked, gwei(95), gwei(5), services.AtFeeCap, gwei(95), gwei(5)},
		{"tip cap leaves no valid replacement", services.FeePolicy{MaxTipCap: gwei(2)}, spiked, gwei(22), gwei(2), services.AtFeeCap, gwei(22), gwei(2)},
		{"legacy: one price, bumped", services.FeePolicy{}, legacy, gwei(20), gwei(20), services.RaiseFees, gwei(30), gwei(30)},
		{"legacy: at market", services.FeePolicy{}, legacy, gwei(30), gwei(30), services.KeepFees, gwei(30), gwei(30)},
	}
	for _, tc := range tests {
		fee, tip, action := tc.policy.Reprice(tc.prevFee, tc.prevTip, tc.s)
		if action != tc.wantAction || fee.Cmp(tc.wantFee) != 0 || tip.Cmp(tc.wantTip) != 0 {
			t.Errorf("%s: %v fee %v tip %v; want %v %v %v", tc.name, action, fee, tip, tc.wantAction, tc.wantFee, tc.wantTip)
			continue
		}
		if action != services.RaiseFees {
			continue
		}
		// A replacement always clears the node's 10% rule on both fees and stays under the caps.
		minFee := new(big.Int).Div(new(big.Int).Mul(tc.prevFee, big.NewInt(110)), big.NewInt(100))
		minTip := new(big.Int).Div(new(big.Int).Mul(tc.prevTip, big.NewInt(110)), big.NewInt(100))
		if fee.Cmp(minFee) < 0 || tip.Cmp(minTip) < 0 {
			t.Errorf("%s: replacement %v/%v does not clear 110%% of %v/%v", tc.name, fee, tip, tc.prevFee, tc.prevTip)
		}
		if (tc.policy.MaxFeeCap != nil && fee.Cmp(tc.policy.MaxFeeCap) > 0) || (tc.policy.MaxTipCap != nil && tip.Cmp(tc.policy.MaxTipCap) > 0) {
			t.Errorf("%s: replacement %v/%v above the caps", tc.name, fee, tip)
		}
	}
}

// A node that refused an attempt as underpriced is outbid whatever the market says: the
// node's floor, or a pool entry at the nonce, is above it even when the suggestion is not.
func TestFeePolicyOutbid(t *testing.T) {
	t.Parallel()
	calm := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)}   // fresh: 22 / 2
	spiked := services.FeeSuggestion{BaseFee: gwei(80), TipCap: gwei(5)} // fresh: 165 / 5
	tests := []struct {
		name             string
		policy           services.FeePolicy
		s                services.FeeSuggestion
		prevFee, prevTip *big.Int
		wantAction       services.RepriceAction
		wantFee, wantTip *big.Int
	}{
		{"at market: still the bump above", services.FeePolicy{}, calm, gwei(22), gwei(2), services.RaiseFees, big.NewInt(24_640_000_000), big.NewInt(2_240_000_000)},
		{"above market: still the bump above", services.FeePolicy{BumpPercent: 20}, calm, gwei(50), gwei(3), services.RaiseFees, gwei(60), big.NewInt(3_600_000_000)},
		{"market higher: the market", services.FeePolicy{}, spiked, gwei(22), gwei(2), services.RaiseFees, gwei(165), gwei(5)},
		{"cap leaves no valid replacement", services.FeePolicy{MaxFeeCap: gwei(23)}, calm, gwei(22), gwei(2), services.AtFeeCap, gwei(22), gwei(2)},
		// A node that keeps refusing: without caps, no higher than 3x the market (66 / 6).
		{"no caps, already near 3x the market", services.FeePolicy{}, calm, gwei(60), gwei(3), services.AtFeeCap, gwei(60), gwei(3)},
		{"no caps, a bump still under 3x the market", services.FeePolicy{}, calm, gwei(58), gwei(5), services.RaiseFees, big.NewInt(64_960_000_000), big.NewInt(5_600_000_000)},
		// The market's tip fell to 0: the tip still rises by the bump, under the fee's bound.
		{"the market's tip at 0, the replacement's tip bumped", services.FeePolicy{}, services.FeeSuggestion{BaseFee: gwei(10), TipCap: new(big.Int)},
			gwei(25), gwei(1), services.RaiseFees, gwei(28), big.NewInt(1_120_000_000)},
		// Base fee and tips 0, with a pool minimum above: nothing rises, so nothing is signed again.
		{"zero fees that cannot rise", services.FeePolicy{}, services.FeeSuggestion{BaseFee: new(big.Int), TipCap: new(big.Int)},
			new(big.Int), new(big.Int), services.AtFeeCap, new(big.Int), new(big.Int)},
	}
	for _, tc := range tests {
		fee, tip, action := tc.policy.Outbid(tc.prevFee, tc.prevTip, tc.s)
		if action != tc.wantAction || fee.Cmp(tc.wantFee) != 0 || tip.Cmp(tc.wantTip) != 0 {
			t.Errorf("%s: %v fee %v tip %v; want %v %v %v", tc.name, action, fee, tip, tc.wantAction, tc.wantFee, tc.wantTip)
		}
		if _, _, market := tc.policy.Reprice(tc.prevFee, tc.prevTip, tc.s); tc.name != "market higher: the market" && tc.wantAction == services.RaiseFees && market != services.KeepFees {
			t.Errorf("%s: the market alone would re-price too (%v): the case does not show what outbidding adds", tc.name, market)
		}
	}
}

// A chain whose tips are 0 (Arbitrum): a node asks nothing above a zero tip (0 x 110% is 0),
// so an attempt whose fee cap fell below the base fee is re-priced with the fee cap alone
// raised; a zero tip does not read as a tip cap no replacement fits.
func TestFeePolicyRepricesAtZeroTips(t *testing.T) {
	t.Parallel()
	s := services.FeeSuggestion{BaseFee: big.NewInt(50_000_000)} // fresh: 100M / 0
	fee, tip, action := services.FeePolicy{}.Reprice(big.NewInt(20_000_000), new(big.Int), s)
	if action != services.RaiseFees || fee.Cmp(big.NewInt(100_000_000)) != 0 || tip.Sign() != 0 {
		t.Fatalf("%v fee %v tip %v; want RaiseFees 100000000 / 0", action, fee, tip)
	}
}

func TestFeePolicyInitialOnALegacyChain(t *testing.T) {
	t.Parallel()
	legacy := services.FeeSuggestion{Legacy: true, GasPrice: gwei(30)}
	tests := []struct {
		name   string
		policy services.FeePolicy
		intent domain.Intent
		want   *big.Int
	}{
		{"the node's gas price", services.FeePolicy{}, domain.Intent{}, gwei(30)},
		{"capped", services.FeePolicy{MaxFeeCap: gwei(25)}, domain.Intent{}, gwei(25)},
		{"the intent's max fee is the price", services.FeePolicy{}, domain.Intent{MaxFeePerGas: gwei(40)}, gwei(40)},
	}
	for _, tc := range tests {
		fee, tip, err := tc.policy.Initial(tc.intent, legacy)
		if err != nil || fee.Cmp(tc.want) != 0 || tip.Cmp(tc.want) != 0 {
			t.Errorf("%s: fee %v tip %v err %v, want both %v", tc.name, fee, tip, err, tc.want)
		}
	}
}

// A client that named its fees set the most its transaction may ever pay: re-pricing stays
// under them, and under the configured caps.
func TestFeePolicyCappedByTheIntent(t *testing.T) {
	t.Parallel()
	spiked := services.FeeSuggestion{BaseFee: gwei(80), TipCap: gwei(5)}
	tests := []struct {
		name                 string
		policy               services.FeePolicy
		intentFee, intentTip *big.Int
		wantFee              *big.Int
		wantAction           services.RepriceAction
	}{
		{"no intent caps", services.FeePolicy{}, nil, nil, gwei(165), services.RaiseFees},
		{"intent fee below the market", services.FeePolicy{}, gwei(60), nil, gwei(60), services.RaiseFees},
		{"configured cap lower than the intent's", services.FeePolicy{MaxFeeCap: gwei(40)}, gwei(60), nil, gwei(40), services.RaiseFees},
		{"intent fee leaves no room", services.FeePolicy{}, gwei(23), nil, gwei(22), services.AtFeeCap},
	}
	for _, tc := range tests {
		fee, _, action := tc.policy.CappedBy(tc.intentFee, tc.intentTip).Reprice(gwei(22), gwei(2), spiked)
		if action != tc.wantAction || fee.Cmp(tc.wantFee) != 0 {
			t.Errorf("%s: %v fee %v, want %v %v", tc.name, action, fee, tc.wantAction, tc.wantFee)
		}
	}
}

// A node's limit on one transaction's fee becomes a fee cap per gas for the transaction's
// gas limit: no first attempt, re-pricing or outbid goes above it.
func TestFeePolicyUnderTheNodesFeeCap(t *testing.T) {
	t.Parallel()
	ether := new(big.Int).Mul(gwei(1), big.NewInt(1_000_000_000))
	spike := services.FeeSuggestion{BaseFee: gwei(100), TipCap: gwei(2)} // fresh: 202 gwei
	tests := []struct {
		name     string
		policy   services.FeePolicy
		gasLimit uint64
		wantFee  *big.Int
	}{
		{"no node cap", services.FeePolicy{}, 10_000_000, gwei(202)},
		{"a transfer stays far under 1 ether", services.FeePolicy{NodeTxFeeCap: ether}, 21_000, gwei(202)},
		{"10M gas: at most 100 gwei", services.FeePolicy{NodeTxFeeCap: ether}, 10_000_000, gwei(100)},
		{"the lower of the node's and the service's caps", services.FeePolicy{NodeTxFeeCap: ether, MaxFeeCap: gwei(80)}, 10_000_000, gwei(80)},
	}
	for _, tc := range tests {
		p := tc.policy.ForGasLimit(tc.gasLimit)
		fee, _, err := p.Initial(domain.Intent{}, spike)
		if err != nil || fee.Cmp(tc.wantFee) != 0 {
			t.Errorf("%s: first attempt at %v (%v), want %v", tc.name, fee, err, tc.wantFee)
		}
		if total := new(big.Int).Mul(fee, new(big.Int).SetUint64(tc.gasLimit)); tc.policy.NodeTxFeeCap != nil && total.Cmp(tc.policy.NodeTxFeeCap) > 0 {
			t.Errorf("%s: fee %s x gas %d above the node's cap", tc.name, fee, tc.gasLimit)
		}
		// An outbid of an attempt already at the cap finds no room rather than going over.
		if _, _, action := p.Outbid(fee, gwei(2), spike); tc.policy.NodeTxFeeCap != nil && tc.gasLimit == 10_000_000 && action == services.RaiseFees {
			t.Errorf("%s: outbid above the node's cap", tc.name)
		}
	}
}

// A gas limit raised after admission (the L1 part Arbitrum counts as gas) lowers the fee cap
// per gas, so that gas limit x fee cap stays at most what was admitted; where nothing caps
// the fee, or the limit did not rise, the policy is unchanged.
func TestFeePolicyForAGasLimitRaisedAfterAdmission(t *testing.T) {
	t.Parallel()
	spike := services.FeeSuggestion{BaseFee: gwei(100), TipCap: gwei(2)} // fresh: 202 gwei
	tests := []struct {
		name               string
		policy             services.FeePolicy
		admitted, gasLimit uint64
		wantFee            *big.Int
	}{
		{"twice the gas: half the cap", services.FeePolicy{MaxFeeCap: gwei(300)}, 21_000, 42_000, gwei(150)},
		{"under the lowered cap: the market's price", services.FeePolicy{MaxFeeCap: gwei(500)}, 21_000, 42_000, gwei(202)},
		{"the same gas: the cap", services.FeePolicy{MaxFeeCap: gwei(150)}, 21_000, 21_000, gwei(150)},
		{"less gas: the cap", services.FeePolicy{MaxFeeCap: gwei(150)}, 42_000, 21_000, gwei(150)},
		{"no cap: the market's price", services.FeePolicy{}, 21_000, 42_000, gwei(202)},
		{"nothing admitted on record: the cap", services.FeePolicy{MaxFeeCap: gwei(150)}, 0, 42_000, gwei(150)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			fee, _, err := tc.policy.ForAdmittedGas(tc.admitted, tc.gasLimit).Initial(domain.Intent{}, spike)
			if err != nil || fee.Cmp(tc.wantFee) != 0 {
				t.Fatalf("fee cap %v (%v), want %v", fee, err, tc.wantFee)
			}
			if tc.policy.MaxFeeCap != nil && tc.admitted != 0 {
				worst, admitted := new(big.Int).Mul(fee, new(big.Int).SetUint64(tc.gasLimit)), new(big.Int).Mul(tc.policy.MaxFeeCap, new(big.Int).SetUint64(tc.admitted))
				if tc.gasLimit > tc.admitted && worst.Cmp(admitted) > 0 {
					t.Fatalf("worst-case fee %s above the %s admitted", worst, admitted)
				}
			}
		})
	}
}
