package services

import (
	"bytes"
	"context"
	"slices"

	"github.com/ethereum/go-ethereum/common"
)

// Signers reports on every signer this node holds a key for, ordered by address: what an
// operator looks at first (txmctl signers, GET /api/v1/admin/signers).
func (uc *AdminUseCase) Signers(ctx context.Context) ([]SignerStatus, error) {
	addrs := uc.signers.Addresses()
	slices.SortFunc(addrs, func(a, b common.Address) int { return bytes.Compare(a[:], b[:]) })
	out := make([]SignerStatus, 0, len(addrs))
	for _, addr := range addrs {
		status, err := uc.SignerStatus(ctx, addr.Hex())
		if err != nil {
			return nil, err
		}
		out = append(out, status)
	}
	return out, nil
}
