package signer

import (
	"fmt"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// parseAddresses parses a configured list by the API's address rule (mixed case must be a
// valid EIP-55 checksum, so a typo cannot silently name another account); field names the
// configuration key in errors.
func parseAddresses(field string, list []string) ([]common.Address, error) {
	out := make([]common.Address, 0, len(list))
	for i, s := range list {
		addr, err := domain.ParseAddress(fmt.Sprintf("%s[%d]", field, i), s)
		if err != nil {
			return nil, err
		}
		out = append(out, addr)
	}
	return out, nil
}
