package domain_test

import (
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// The names ParseCreateRequest may give a failing field: the API's names for the input.
var createInputFields = map[string]bool{
	"signer": true, "requestId": true, "to": true, "value": true, "data": true,
	"gasLimit": true, "maxFeePerGas": true, "maxPriorityFeePerGas": true,
}

// FuzzParseCreateRequest: whatever a client sends, validation either names the bad field
// or yields a request within every limit, whose addresses are the ones given and whose
// fingerprint does not depend on how the same intent was spelt.
func FuzzParseCreateRequest(f *testing.F) {
	const (
		checksummed = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"
		lower       = "0x71c7656ec7ab88b098defb751b7401b5f6d8976f"
		upper       = "0x71C7656EC7AB88B098DEFB751B7401B5F6D8976F"
		badChecksum = "0x71c7656EC7ab88b098defB751B7401B5f6d8976F"
	)
	seeds := []domain.CreateInput{
		{Signer: checksummed, To: lower, Value: "12345", GasLimit: 21000},
		{Signer: lower, RequestID: "invoice-42", To: upper, Value: "0xff", Data: "0x6000", GasLimit: 30_000_000, MaxFeePerGas: "100", MaxPriorityFeePerGas: "0x64"},
		{Signer: upper, Data: "0x60006000fd"},
		{Signer: badChecksum, To: lower},
		{Signer: checksummed, To: lower, Value: "115792089237316195423570985008687907853269984665640564039457584007913129639935"},
		{Signer: checksummed, To: lower, Value: "0x1" + strings.Repeat("0", 64)},
		{Signer: checksummed, To: lower, Value: "-1", GasLimit: 20_999},
		{Signer: checksummed, To: lower, GasLimit: 30_000_001, MaxFeePerGas: "1", MaxPriorityFeePerGas: "2"},
		{Signer: checksummed, To: lower, Data: "0xabc"},
		{Signer: checksummed, To: lower, Data: "0x" + strings.Repeat("ab", 128<<10+1)},
		{Signer: checksummed, RequestID: "'; DROP TABLE managed_tx; --", To: lower},
		{Signer: checksummed, RequestID: strings.Repeat("x", 129), To: lower},
		{Signer: checksummed, RequestID: "id\u202e\u0000🙂", To: lower},
		{Signer: "0x71C7656EC7ab88b098defB751B7401B5f6d8976\u0430", To: lower},
		{Signer: "0X71C7656EC7ab88b098defB751B7401B5f6d8976F", To: "0x" + strings.Repeat("0", 40), Value: "0x"},
		{Signer: "\xff" + checksummed[1:], To: lower, Value: "1e18", Data: "6000"},
		{},
	}
	for _, in := range seeds {
		f.Add(in.Signer, in.RequestID, in.To, in.Value, in.Data, in.GasLimit, in.MaxFeePerGas, in.MaxPriorityFeePerGas)
	}
	limits := domain.DefaultLimits()
	maxUint256 := new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))
	inWeiRange := func(v *big.Int) bool { return v.Sign() >= 0 && v.Cmp(maxUint256) <= 0 }

	f.Fuzz(func(t *testing.T, signer, requestID, to, value, data string, gasLimit uint64, maxFee, maxTip string) {
		in := domain.CreateInput{Signer: signer, RequestID: requestID, To: to, Value: value, Data: data, GasLimit: gasLimit,
			MaxFeePerGas: maxFee, MaxPriorityFeePerGas: maxTip}
		req, err := domain.ParseCreateRequest(in, limits)
		if err != nil {
			var verr *domain.ValidationError
			if !errors.As(err, &verr) || error(verr) != err { //nolint:errorlint // it must be the *ValidationError itself, not a wrapper
				t.Fatalf("error %T %v is not a *ValidationError", err, err)
			}
			if !createInputFields[verr.Field] {
				t.Fatalf("error names field %q, not one of the input's", verr.Field)
			}
			if !errors.Is(err, domain.ErrInvalidArgument) {
				t.Fatalf("%v does not match ErrInvalidArgument", err)
			}
			if verr.Reason == "" {
				t.Fatalf("error for %s gives no reason", verr.Field)
			}
			return
		}

		if got := req.Signer.Hex(); !strings.EqualFold(got, signer) || req.SignerHex != got {
			t.Fatalf("signer %q parsed as %s (SignerHex %s)", signer, got, req.SignerHex)
		}
		switch {
		case to == "" && req.Intent.To != nil:
			t.Fatalf("no recipient given, but parsed %s", req.Intent.To.Hex())
		case to == "" && len(req.Intent.Data) == 0:
			t.Fatal("contract creation without code was accepted")
		case to != "" && (req.Intent.To == nil || !strings.EqualFold(req.Intent.To.Hex(), to) || req.Intent.ToHex != req.Intent.To.Hex()):
			t.Fatalf("recipient %q parsed as %v (ToHex %s)", to, req.Intent.To, req.Intent.ToHex)
		}
		if req.Intent.Value == nil || !inWeiRange(req.Intent.Value) {
			t.Fatalf("value %q parsed as %v, outside 0..2^256-1", value, req.Intent.Value)
		}
		if len(req.Intent.Data) > limits.MaxDataBytes {
			t.Fatalf("%d bytes of data accepted, limit %d", len(req.Intent.Data), limits.MaxDataBytes)
		}
		if g := req.Intent.GasLimit; g != gasLimit || g != 0 && (g < 21_000 || g > limits.MaxGasLimit) {
			t.Fatalf("gas limit %d accepted as %d, want 0 or 21000..%d", gasLimit, g, limits.MaxGasLimit)
		}
		for name, fee := range map[string]*big.Int{"maxFeePerGas": req.Intent.MaxFeePerGas, "maxPriorityFeePerGas": req.Intent.MaxPriorityFeePerGas} {
			if fee != nil && !inWeiRange(fee) {
				t.Fatalf("%s parsed as %v, outside 0..2^256-1", name, fee)
			}
		}
		if fee, tip := req.Intent.MaxFeePerGas, req.Intent.MaxPriorityFeePerGas; fee != nil && tip != nil && tip.Cmp(fee) > 0 {
			t.Fatalf("tip %v above fee cap %v accepted", tip, fee)
		}
		if req.RequestID != requestID || len(requestID) > limits.MaxRequestIDLength {
			t.Fatalf("requestId %q accepted as %q", requestID, req.RequestID)
		}
		for i := 0; i < len(req.RequestID); i++ {
			if c := req.RequestID[i]; c < 0x21 || c > 0x7e {
				t.Fatalf("requestId %q accepted with byte %#x", req.RequestID, c)
			}
		}

		// Idempotency rests on the fingerprint: the same input parses to the same one, and so
		// does the same intent with its addresses in lower case (always accepted).
		fp := req.Fingerprint()
		again, err := domain.ParseCreateRequest(in, limits)
		if err != nil || again.Fingerprint() != fp {
			t.Fatalf("second parse of the same input: err %v, fingerprint changed %t", err, again.Fingerprint() != fp)
		}
		lowered := in
		lowered.Signer, lowered.To = strings.ToLower(in.Signer), strings.ToLower(in.To)
		same, err := domain.ParseCreateRequest(lowered, limits)
		if err != nil {
			t.Fatalf("the lower-case spelling of an accepted input is refused: %v", err)
		}
		if same.Fingerprint() != fp {
			t.Fatalf("fingerprint depends on address case: %+v vs %+v", in, lowered)
		}
	})
}
