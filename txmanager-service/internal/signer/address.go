package signer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ethereum/go-ethereum/common"
)

// ParseAddress reads a configured signer address: "0x" and 40 hex digits. Mixed case must
// be a valid EIP-55 checksum, because a typo in a checksummed address would otherwise
// silently name a different account.
func ParseAddress(s string) (common.Address, error) {
	// A malformed entry is not echoed: a private key pasted into an address list must not
	// end up in an error message.
	digits, ok := strings.CutPrefix(s, "0x")
	if !ok || len(digits) != 2*common.AddressLength {
		return common.Address{}, fmt.Errorf("not an address: want 0x followed by 40 hex digits, got %d characters", len(s))
	}
	for _, c := range digits {
		if !isHexDigit(c) {
			return common.Address{}, errors.New("not an address: want 0x followed by 40 hex digits, found a non-hex character")
		}
	}
	addr := common.HexToAddress(s)
	isMixedCase := digits != strings.ToLower(digits) && digits != strings.ToUpper(digits)
	if isMixedCase && addr.Hex() != s {
		return common.Address{}, fmt.Errorf("address %q: invalid EIP-55 checksum (did you mean %s?)", s, addr.Hex())
	}
	return addr, nil
}

// parseAddresses parses a configured list; field names the configuration key in errors.
func parseAddresses(field string, list []string) ([]common.Address, error) {
	out := make([]common.Address, 0, len(list))
	for i, s := range list {
		addr, err := ParseAddress(s)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", field, i, err)
		}
		out = append(out, addr)
	}
	return out, nil
}

func isHexDigit(c rune) bool {
	return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') || ('A' <= c && c <= 'F')
}
