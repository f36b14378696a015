package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestParseNewPayout(t *testing.T) {
	t.Parallel()
	const checksummed = "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAed" // EIP-55 test vector
	tests := []struct {
		name, to, amount, key string
		wantAmount            string
		wantErr               string
	}{
		{name: "lower case", to: strings.ToLower(checksummed), amount: "1000", wantAmount: "1000"},
		{name: "checksummed", to: checksummed, amount: "1", wantAmount: "1"},
		{name: "leading zeros dropped", to: checksummed, amount: "007", wantAmount: "7"},
		{name: "max uint256", to: checksummed, amount: "115792089237316195423570985008687907853269984665640564039457584007913129639935",
			wantAmount: "115792089237316195423570985008687907853269984665640564039457584007913129639935"},
		{name: "bad checksum", to: "0x5aAeb6053F3E94C9b9A09f33669435E7Ef1BeAeD", amount: "1", wantErr: "checksum"},
		{name: "missing to", amount: "1", wantErr: "to is required"},
		{name: "short to", to: "0x1234", amount: "1", wantErr: "40 hex digits"},
		{name: "no prefix", to: strings.TrimPrefix(checksummed, "0x") + "00", amount: "1", wantErr: "40 hex digits"},
		{name: "not hex", to: "0x" + strings.Repeat("g", 40), amount: "1", wantErr: "40 hex digits"},
		{name: "zero address", to: "0x" + strings.Repeat("0", 40), amount: "1", wantErr: "zero address"},
		{name: "missing amount", to: checksummed, wantErr: "amount is required"},
		{name: "zero amount", to: checksummed, amount: "0", wantErr: "positive"},
		{name: "negative amount", to: checksummed, amount: "-5", wantErr: "digits only"},
		{name: "hex amount", to: checksummed, amount: "0x10", wantErr: "digits only"},
		{name: "fraction", to: checksummed, amount: "1.5", wantErr: "digits only"},
		{name: "above uint256", to: checksummed, amount: "115792089237316195423570985008687907853269984665640564039457584007913129639936", wantErr: "uint256"},
		{name: "key too long", to: checksummed, amount: "1", key: strings.Repeat("k", 129), wantErr: "longer than"},
		{name: "key with space", to: checksummed, amount: "1", key: "a b", wantErr: "visible ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ParseNewPayout(tt.to, tt.amount, tt.key)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrInvalidPayout) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrInvalidPayout containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.AmountWei != tt.wantAmount {
				t.Errorf("amount = %s, want %s", got.AmountWei, tt.wantAmount)
			}
		})
	}
}
