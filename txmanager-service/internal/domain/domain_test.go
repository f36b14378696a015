package domain_test

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/ethereum/go-ethereum/common"
)

func u64(v uint64) *uint64 { return &v }

func TestNextNonceTakesTheMaximumOfPresentSources(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                 string
		chain, cache, cursor *uint64
		want                 uint64
	}{
		{"nothing known", nil, nil, nil, 0},
		{"database only", nil, nil, u64(7), 7},
		{"chain ahead (external sends)", u64(12), u64(9), u64(9), 12},
		{"cache ahead of a lagging chain", u64(3), u64(10), u64(10), 10},
		{"cursor ahead of a stale cache", nil, u64(4), u64(8), 8},
		{"zero values vote", u64(0), u64(0), u64(0), 0},
	}
	for _, tc := range tests {
		if got := domain.NextNonce(tc.chain, tc.cache, tc.cursor); got != tc.want {
			t.Errorf("%s: NextNonce = %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestStateTransitions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		from, to domain.State
		want     bool
	}{
		{domain.StateAllocated, domain.StateTracking, true},
		{domain.StateTracking, domain.StateConfirmed, true},
		{domain.StateTracking, domain.StateTracking, true},
		{domain.StateStuck, domain.StateConfirmed, true},
		{domain.StateConfirmed, domain.StateTracking, false},
		{domain.StateFailedFinal, domain.StateConfirmed, false},
		{domain.StateAllocated, domain.StateConfirmed, false},
	}
	for _, tc := range tests {
		if got := domain.CanTransition(tc.from, tc.to); got != tc.want {
			t.Errorf("CanTransition(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.want)
		}
	}
	if !domain.StateConfirmed.Final() || domain.StateStuck.Final() || domain.State("BOGUS").Valid() {
		t.Error("Final/Valid misclassify states")
	}
}

const checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed"

func TestParseCreateRequest(t *testing.T) {
	t.Parallel()
	limits := domain.DefaultLimits()
	valid := domain.CreateInput{Signer: checksummed, To: strings.ToLower(checksummed), Value: "1000", GasLimit: 21000}
	tests := []struct {
		name      string
		mutate    func(*domain.CreateInput)
		wantField string // "" = valid
	}{
		{"valid", func(*domain.CreateInput) {}, ""},
		{"hex value", func(in *domain.CreateInput) { in.Value = "0x3e8" }, ""},
		{"max uint256", func(in *domain.CreateInput) { in.Value = "0x" + strings.Repeat("f", 64) }, ""},
		{"contract creation", func(in *domain.CreateInput) { in.To = ""; in.Data = "0x6000"; in.GasLimit = 53_022 }, ""},
		{"contract creation below its intrinsic gas", func(in *domain.CreateInput) { in.To = ""; in.Data = "0x6000"; in.GasLimit = 53_021 }, "gasLimit"},
		{"call data at its floor, above its intrinsic gas", func(in *domain.CreateInput) { in.Data = "0x00ff"; in.GasLimit = 21_050 }, ""},
		{"call data below its floor", func(in *domain.CreateInput) { in.Data = "0x00ff"; in.GasLimit = 21_049 }, "gasLimit"},
		{"zero bytes at their floor", func(in *domain.CreateInput) { in.Data = "0x" + strings.Repeat("00", 100); in.GasLimit = 22_000 }, ""},
		{"zero bytes under their floor, above their intrinsic gas", func(in *domain.CreateInput) { in.Data = "0x" + strings.Repeat("00", 100); in.GasLimit = 21_999 }, "gasLimit"},
		{"call data at Prague's floor", func(in *domain.CreateInput) { in.Data = "0x" + strings.Repeat("ab", 1000); in.GasLimit = 61_000 }, ""},
		{"call data under Prague's floor", func(in *domain.CreateInput) { in.Data = "0x" + strings.Repeat("ab", 1000); in.GasLimit = 60_999 }, "gasLimit"},
		{"missing signer", func(in *domain.CreateInput) { in.Signer = "" }, "signer"},
		{"short signer", func(in *domain.CreateInput) { in.Signer = "0x1234" }, "signer"},
		{"non-hex signer", func(in *domain.CreateInput) { in.Signer = "0x" + strings.Repeat("z", 40) }, "signer"},
		{"bad checksum", func(in *domain.CreateInput) { in.To = strings.Replace(checksummed, "a", "A", 1) }, "to"},
		{"negative value", func(in *domain.CreateInput) { in.Value = "-1" }, "value"},
		{"overflowing value", func(in *domain.CreateInput) { in.Value = "0x1" + strings.Repeat("0", 64) }, "value"},
		{"decimal with junk", func(in *domain.CreateInput) { in.Value = "12abc" }, "value"},
		{"float value", func(in *domain.CreateInput) { in.Value = "1.5" }, "value"},
		{"odd hex data", func(in *domain.CreateInput) { in.Data = "0xabc" }, "data"},
		{"non-hex data", func(in *domain.CreateInput) { in.Data = "0xzz" }, "data"},
		{"unprefixed data", func(in *domain.CreateInput) { in.Data = "abcd" }, "data"},
		{"oversize data", func(in *domain.CreateInput) { in.Data = "0x" + strings.Repeat("00", limits.MaxDataBytes+1) }, "data"},
		{"creation without code", func(in *domain.CreateInput) { in.To = "" }, "to"},
		{"gas below intrinsic", func(in *domain.CreateInput) { in.GasLimit = 20999 }, "gasLimit"},
		{"gas above cap", func(in *domain.CreateInput) { in.GasLimit = limits.MaxGasLimit + 1 }, "gasLimit"},
		// Every node of a chain that enforces EIP-7825 refuses a transaction above 2^24 gas.
		{"gas above EIP-7825's cap by default", func(in *domain.CreateInput) { in.GasLimit = 1<<24 + 1 }, "gasLimit"},
		{"tip above fee cap", func(in *domain.CreateInput) { in.MaxFeePerGas = "10"; in.MaxPriorityFeePerGas = "11" }, "maxPriorityFeePerGas"},
		{"request id with space", func(in *domain.CreateInput) { in.RequestID = "a b" }, "requestId"},
		{"request id unicode", func(in *domain.CreateInput) { in.RequestID = "订单-1" }, "requestId"},
		{"request id too long", func(in *domain.CreateInput) { in.RequestID = strings.Repeat("r", 129) }, "requestId"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := valid
			tc.mutate(&in)
			_, err := domain.ParseCreateRequest(in, limits)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			var verr *domain.ValidationError
			if !errors.As(err, &verr) || verr.Field != tc.wantField || !errors.Is(err, domain.ErrInvalidArgument) {
				t.Fatalf("err = %v, want a validation error on %q", err, tc.wantField)
			}
		})
	}
}

func TestFingerprintSeparatesIntents(t *testing.T) {
	t.Parallel()
	base, err := domain.ParseCreateRequest(domain.CreateInput{Signer: checksummed, To: checksummed, Value: "1"}, domain.DefaultLimits())
	if err != nil {
		t.Fatal(err)
	}
	same := base
	same.Intent.Value = big.NewInt(1)
	if base.Fingerprint() != same.Fingerprint() {
		t.Fatal("equal intents have different fingerprints")
	}
	variants := map[string]func(*domain.CreateRequest){
		"value":      func(r *domain.CreateRequest) { r.Intent.Value = big.NewInt(2) },
		"data":       func(r *domain.CreateRequest) { r.Intent.Data = []byte{1} },
		"gas":        func(r *domain.CreateRequest) { r.Intent.GasLimit = 50000 },
		"fee cap":    func(r *domain.CreateRequest) { r.Intent.MaxFeePerGas = big.NewInt(0) },
		"creation":   func(r *domain.CreateRequest) { r.Intent.To = nil },
		"other from": func(r *domain.CreateRequest) { r.Signer[0] ^= 1 },
	}
	for name, mutate := range variants {
		v := base
		mutate(&v)
		if v.Fingerprint() == base.Fingerprint() {
			t.Errorf("changing %s kept the fingerprint", name)
		}
	}
}

func TestLeaseLocalDeadline(t *testing.T) {
	t.Parallel()
	sent := time.Now()
	dbNow := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lease := domain.Lease{ValidUntil: domain.LocalDeadline(sent, dbNow, dbNow.Add(10*time.Second), time.Second)}
	if got := lease.ValidUntil.Sub(sent); got != 9*time.Second {
		t.Fatalf("local validity = %s, want 9s (10s lease less 1s skew)", got)
	}
	if !lease.HeldAt(sent.Add(8*time.Second)) || lease.HeldAt(sent.Add(9*time.Second)) {
		t.Fatal("HeldAt does not honour the local deadline")
	}
}

func TestParseAddress(t *testing.T) {
	t.Parallel()
	checksummed := "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed" // the EIP-55 example
	tests := []struct {
		in     string
		wantOK bool
	}{
		{checksummed, true},
		{strings.ToLower(checksummed), true},
		{"0x" + strings.ToUpper(checksummed[2:]), true},
		{"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", false}, // last letter's case flipped
		{checksummed[2:], false},
		{"0X" + checksummed[2:], false},
		{checksummed + "00", false},
		{"0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeg", false},
		{"", false},
	}
	for _, tt := range tests {
		got, err := domain.ParseAddress("address", tt.in)
		if (err == nil) != tt.wantOK {
			t.Fatalf("ParseAddress(%q) error = %v, want ok=%v", tt.in, err, tt.wantOK)
		}
		if tt.wantOK && !strings.EqualFold(got.Hex(), tt.in) {
			t.Fatalf("ParseAddress(%q) = %s", tt.in, got.Hex())
		}
	}
}

// Fingerprints are stored with every transaction and compared with later replays: their
// encoding is pinned, so a refactor cannot turn a replay across an upgrade into a conflict.
func TestFingerprintEncodingIsStable(t *testing.T) {
	to := common.HexToAddress("0xbb")
	req := domain.CreateRequest{Signer: common.HexToAddress("0xaa"),
		Intent: domain.Intent{To: &to, Value: big.NewInt(5), Data: []byte{1, 2}, GasLimit: 21000, MaxFeePerGas: big.NewInt(9)}}
	if got := fmt.Sprintf("%x", req.Fingerprint()); got != "fda79c519667172bc24c7a3309b9564abf9f52fbd0774998f737bdb0a3586520" {
		t.Errorf("fingerprint %s: the stored encoding changed", got)
	}
}

// What a transaction cost: gas used at the effective price, plus an OP-stack chain's L1
// data fee; unknown without the price.
func TestReceiptFee(t *testing.T) {
	tests := []struct {
		name    string
		receipt domain.ReceiptSummary
		want    *big.Int
	}{
		{"gas at its price", domain.ReceiptSummary{GasUsed: 21_000, EffectiveGasPrice: big.NewInt(3_000_000_000)}, big.NewInt(63_000_000_000_000)},
		{"plus the L1 data fee", domain.ReceiptSummary{GasUsed: 21_000, EffectiveGasPrice: big.NewInt(1_000), L1Fee: big.NewInt(5)}, big.NewInt(21_000_005)},
		{"price not given", domain.ReceiptSummary{GasUsed: 21_000}, nil},
	}
	for _, tc := range tests {
		got := tc.receipt.Fee()
		if (got == nil) != (tc.want == nil) || (got != nil && got.Cmp(tc.want) != 0) {
			t.Errorf("%s: Fee() = %v, want %v", tc.name, got, tc.want)
		}
	}
}
