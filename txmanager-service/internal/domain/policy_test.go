package domain_test

import (
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A policy document is refused with the field (and entry) at fault named; a document that
// parses comes back from its canonical JSON unchanged.
func TestParsePolicy(t *testing.T) {
	const a = "0x00000000000000000000000000000000000a11ce"
	tests := []struct {
		name, doc string
		wantField string // "" accepted
	}{
		{"every rule", `{"destinations":[{"address":"` + a + `","selectors":["0xa9059cbb"]}],"maxValuePerTx":"10","maxFeePerGas":"100","windows":[{"period":"1h","maxValue":"5"},{"period":"24h","maxFee":"7"}],"minRemainingBalance":"1"}`, ""},
		{"an empty allowlist", `{"destinations":[]}`, ""},
		{"empty", ``, "policy"},
		{"not an object", `[1]`, "policy"},
		{"no rule", `{}`, "policy"},
		{"an unknown rule", `{"maxValue":"1"}`, "maxValue"},
		{"a negative amount", `{"maxValuePerTx":"-1"}`, "maxValuePerTx"},
		{"an amount as a number", `{"maxFeePerGas":100}`, "maxFeePerGas"},
		{"an absurd amount", `{"minRemainingBalance":"` + strings.Repeat("9", 80) + `"}`, "minRemainingBalance"},
		{"a malformed address", `{"destinations":[{"address":"0x12"}]}`, "destinations[0]"},
		{"an address twice", `{"destinations":[{"address":"` + a + `"},{"address":"0x` + strings.ToUpper(a[2:]) + `"}]}`, "destinations[1].address"},
		{"a short selector", `{"destinations":[{"address":"` + a + `","selectors":["0xa9059c"]}]}`, "destinations[0]"},
		{"an unknown destination field", `{"destinations":[{"address":"` + a + `","action":"approve"}]}`, "destinations[0]"},
		{"a period under a minute", `{"windows":[{"period":"30s","maxValue":"1"}]}`, "windows[0]"},
		{"a period of fractions of minutes", `{"windows":[{"period":"90s","maxValue":"1"}]}`, "windows[0]"},
		{"a period over 31 days", `{"windows":[{"period":"745h","maxValue":"1"}]}`, "windows[0]"},
		{"a window without a limit", `{"windows":[{"period":"1h"}]}`, "windows[0]"},
		{"a period twice", `{"windows":[{"period":"1h","maxValue":"1"},{"period":"60m","maxFee":"1"}]}`, "windows[1].period"},
		{"an approval above a value", `{"approval":{"aboveValue":"100","approvers":2,"role":"treasury","expiresAfter":"30m"}}`, ""},
		{"a destination marked approve", `{"destinations":[{"address":"` + a + `","approve":true}],"approval":{"approvers":1}}`, ""},
		{"approve without an approval rule", `{"destinations":[{"address":"` + a + `","approve":true}]}`, "destinations[0].approve"},
		{"an approval sending nothing", `{"approval":{"approvers":2}}`, "approval"},
		{"no approvers", `{"approval":{"aboveValue":"1","approvers":0}}`, "approval.approvers"},
		{"too many approvers", `{"approval":{"aboveValue":"1","approvers":11}}`, "approval.approvers"},
		{"a role with capitals", `{"approval":{"aboveValue":"1","approvers":1,"role":"Treasury"}}`, "approval.role"},
		{"an expiry under 10 seconds", `{"approval":{"aboveValue":"1","approvers":1,"expiresAfter":"5s"}}`, "approval"},
		{"an unknown approval field", `{"approval":{"aboveValue":"1","approvers":1,"quorum":2}}`, "approval"},
		{"a negative threshold", `{"approval":{"aboveValue":"-1","approvers":1}}`, "approval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := domain.ParsePolicy([]byte(tc.doc))
			if tc.wantField == "" {
				if err != nil {
					t.Fatal(err)
				}
				again, err := domain.ParsePolicy(p.JSON())
				if err != nil || string(again.JSON()) != string(p.JSON()) {
					t.Fatalf("canonical form %s does not come back: %v", p.JSON(), err)
				}
				return
			}
			var v *domain.ValidationError
			if !errors.As(err, &v) || v.Field != tc.wantField {
				t.Fatalf("got %v, want a refusal naming %s", err, tc.wantField)
			}
		})
	}
}

// A fee window counts an intent's worst-case fee: its gas at the fee cap, and on a chain
// that charges an L1 data fee, that fee's bound as well.
func TestFeeWindowCountsTheL1DataFee(t *testing.T) {
	p, err := domain.ParsePolicy([]byte(`{"windows":[{"period":"1h","maxFee":"1000000"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		dataFee  *big.Int
		counted  int64
		wantRule string
	}{
		{"gas alone fits", nil, 0, ""},
		{"the data fee on top passes the limit", big.NewInt(600_000), 0, domain.PolicyRuleWindowFee},
		{"a small data fee fits", big.NewInt(100_000), 0, ""},
		{"with what the window counted", big.NewInt(100_000), 500_000, domain.PolicyRuleWindowFee},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// 21,000 gas at 20 wei: 420,000 wei of gas.
			check := domain.PolicyCheck{GasLimit: 21_000, FeeCapPerGas: big.NewInt(20), DataFeeBound: tc.dataFee}
			rule, detail := p.Windows[0].CheckWindow(check, domain.WindowTotals{Value: new(big.Int), Fee: big.NewInt(tc.counted)})
			if rule != tc.wantRule {
				t.Fatalf("rule %q (%s), want %q", rule, detail, tc.wantRule)
			}
		})
	}
}
