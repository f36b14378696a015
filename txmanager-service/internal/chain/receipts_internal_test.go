package chain

import (
	"encoding/json"
	"testing"
)

const (
	hash1 = "1111111111111111111111111111111111111111111111111111111111111111"
	hash2 = "2222222222222222222222222222222222222222222222222222222222222222"
)

// A receipt keeps what the transaction cost: its effective gas price, and the L1 data fee
// an OP-stack node (op-geth) adds; a node that gives neither leaves both unknown.
func TestReceiptKeepsWhatTheTransactionCost(t *testing.T) {
	const base = `"transactionHash":"0x` + hash1 + `","blockHash":"0x` + hash2 + `","blockNumber":"0x10","status":"0x1","gasUsed":"0x5208","transactionIndex":"0x0"`
	tests := []struct {
		name         string
		json         string
		price, l1Fee string
	}{
		{"geth", `{` + base + `,"effectiveGasPrice":"0x3b9aca00"}`, "1000000000", ""},
		{"op-geth", `{` + base + `,"effectiveGasPrice":"0x3b9aca00","l1Fee":"0x2710","l1GasUsed":"0x640"}`, "1000000000", "10000"},
		{"a node that says neither", `{` + base + `}`, "", ""},
	}
	for _, tc := range tests {
		var r rpcReceipt
		if err := json.Unmarshal([]byte(tc.json), &r); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, err := r.toReceipt()
		if err != nil || got == nil {
			t.Fatalf("%s: %v, %v", tc.name, got, err)
		}
		text := func(v interface{ String() string }, isNil bool) string {
			if isNil {
				return ""
			}
			return v.String()
		}
		if p := text(got.EffectiveGasPrice, got.EffectiveGasPrice == nil); p != tc.price {
			t.Errorf("%s: effective gas price %q, want %q", tc.name, p, tc.price)
		}
		if l1 := text(got.L1Fee, got.L1Fee == nil); l1 != tc.l1Fee {
			t.Errorf("%s: L1 fee %q, want %q", tc.name, l1, tc.l1Fee)
		}
	}
}
