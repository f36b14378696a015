package stuck

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestIsStuck(t *testing.T) {
	now := time.Unix(10_000, 0)
	cfg := Config{MinAge: time.Minute, MinAttempts: 3}
	head := func(state domain.State, waited time.Duration, attempts int) *HeadOfLineTx {
		return &HeadOfLineTx{State: state, Since: now.Add(-waited), SubmitAttempts: attempts}
	}
	tests := []struct {
		name string
		head *HeadOfLineTx
		want bool
	}{
		{"nothing waiting", nil, false},
		{"past both thresholds", head(domain.StateTracking, 2*time.Minute, 3), true},
		{"too young", head(domain.StateTracking, 30*time.Second, 5), false},
		{"too few attempts", head(domain.StateTracking, time.Hour, 2), false},
		{"already marked STUCK", head(domain.StateStuck, time.Hour, 9), false},
	}
	for _, tc := range tests {
		if got := isStuck(tc.head, now, cfg); got != tc.want {
			t.Errorf("%s: isStuck = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestClaimFor(t *testing.T) {
	head := &HeadOfLineTx{TxID: uuid.New()}
	capped := fmt.Errorf("%w: 2 gwei", services.ErrFeeCapReached)
	tests := []struct {
		name         string
		action       domain.ResolutionAction
		attemptErr   error
		wantState    domain.State
		wantSubState domain.SubState
		wantFallback bool
		wantErr      bool
	}{
		{"noop marks STUCK", domain.ActionNoop, nil, domain.StateStuck, "NOOP", false, false},
		{"cancel resolves", domain.ActionCancel, nil, domain.StateTracking, "RESOLVING_CANCEL", false, false},
		{"replace resolves", domain.ActionReplace, nil, domain.StateTracking, "RESOLVING_REPLACE", false, false},
		{"placeholder resolves", domain.ActionPlaceholder, nil, domain.StateTracking, "RESOLVING_PLACEHOLDER", false, false},
		{"no fee within the caps: STUCK instead", domain.ActionReplace, capped, domain.StateStuck, "NOOP", true, false},
		{"signing failed: no claim", domain.ActionCancel, errors.New("signer down"), "", "", false, true},
		{"unknown action", domain.ResolutionAction("PRAY"), nil, "", "", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			claim, fallback, err := claimFor(head, Decision{Action: tc.action, Reason: "r"}, tc.attemptErr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if claim.TxID != head.TxID || claim.NewState != tc.wantState || claim.SubState != tc.wantSubState || fallback != tc.wantFallback {
				t.Errorf("claim %+v fallback %v", claim, fallback)
			}
			if fallback && !strings.Contains(claim.Reason, "2 gwei") {
				t.Errorf("fallback reason %q does not say why", claim.Reason)
			}
		})
	}
}

func TestResolutionTx(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	head := &HeadOfLineTx{Signer: signer.Hex(), Nonce: 7, GasLimit: 90_000,
		Intent: domain.Intent{To: &to, Value: big.NewInt(5), Data: []byte{1, 2}}}
	tests := []struct {
		action   domain.ResolutionAction
		wantKind pipeline.AttemptKind
		wantTo   common.Address
		wantGas  uint64
		wantVal  int64
	}{
		{domain.ActionReplace, pipeline.AttemptReplace, to, 90_000, 5},
		{domain.ActionCancel, pipeline.AttemptCancel, signer, services.PlainTransferGas, 0},
		{domain.ActionPlaceholder, pipeline.AttemptPlaceholder, signer, services.PlainTransferGas, 0},
	}
	for _, tc := range tests {
		u, kind := resolutionTx(head, tc.action)
		if kind != tc.wantKind || *u.To != tc.wantTo || u.Gas != tc.wantGas || u.Value.Int64() != tc.wantVal || u.Nonce != 7 || u.From != signer {
			t.Errorf("%s: %+v kind %s", tc.action, u, kind)
		}
	}
}

func TestPolicyHookAnswersItsAction(t *testing.T) {
	for _, action := range []domain.ResolutionAction{"", domain.ActionNoop, domain.ActionCancel} {
		d, err := PolicyHook{Action: action}.Decide(t.Context(), Case{Age: time.Minute, SubmitAttempts: 4})
		want := action
		if want == "" {
			want = domain.ActionNoop
		}
		if err != nil || d.Action != want || !strings.Contains(d.Reason, "4 attempts") {
			t.Errorf("PolicyHook{%q}: %+v, %v", action, d, err)
		}
	}
}

// A resolution's fees: a fresh attempt's where nothing of ours was taken at the nonce (never
// signed, or refused by every node), whatever the refused attempt paid; otherwise an outbid
// of the current attempt within the caps and, without caps, at most 3x the market, so that
// resolutions repeated round after round do not compound the fees.
func TestResolutionFees(t *testing.T) {
	gwei := func(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1_000_000_000)) }
	market := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)} // fresh: 22 / 2
	tests := []struct {
		name             string
		policy           services.FeePolicy
		head             HeadOfLineTx
		wantFee, wantTip *big.Int
		wantCapped       bool
	}{
		{"never signed: the market", services.FeePolicy{}, HeadOfLineTx{}, gwei(22), gwei(2), false},
		{"refused by every node at the cap: the market, no bump needed", services.FeePolicy{MaxFeeCap: gwei(30)},
			HeadOfLineTx{SubState: domain.SubStateNotMineable, MaxFee: gwei(30), MaxTip: gwei(2)}, gwei(22), gwei(2), false},
		{"refused by every node short of the L1 part at the cap: the market", services.FeePolicy{MaxFeeCap: gwei(30)},
			HeadOfLineTx{SubState: domain.SubStateL1GasShort, MaxFee: gwei(30), MaxTip: gwei(2)}, gwei(22), gwei(2), false},
		{"in a pool: outbid", services.FeePolicy{}, HeadOfLineTx{SubState: domain.SubStateSubmitted, MaxFee: gwei(22), MaxTip: gwei(2)},
			big.NewInt(24_640_000_000), big.NewInt(2_240_000_000), false},
		{"in a pool at the cap: no room", services.FeePolicy{MaxFeeCap: gwei(23)}, HeadOfLineTx{SubState: domain.SubStateSubmitted, MaxFee: gwei(22), MaxTip: gwei(2)},
			nil, nil, true},
		{"resolved round after round: not past 3x the market", services.FeePolicy{}, HeadOfLineTx{SubState: domain.SubStateSubmitted, MaxFee: gwei(60), MaxTip: gwei(6)},
			nil, nil, true},
	}
	for _, tt := range tests {
		fee, tip, err := resolutionFees(tt.policy, &tt.head, market)
		if tt.wantCapped {
			if !errors.Is(err, services.ErrFeeCapReached) {
				t.Errorf("%s: %v %v %v, want the caps reached", tt.name, fee, tip, err)
			}
			continue
		}
		if err != nil || fee.Cmp(tt.wantFee) != 0 || tip.Cmp(tt.wantTip) != 0 {
			t.Errorf("%s: fee %v tip %v (%v), want %v / %v", tt.name, fee, tip, err, tt.wantFee, tt.wantTip)
		}
	}
}
