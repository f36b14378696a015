package controllers

import (
	"context"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// principal is the caller the authentication middleware established.
func principal(ctx context.Context) (domain.Principal, error) {
	p, ok := domain.PrincipalFrom(ctx)
	if !ok {
		return p, v1.ErrorUnauthenticated("credentials required")
	}
	return p, nil
}

// requireSigner allows the call only for a caller granted signer. A signer that does not
// parse is left to validation (which answers 400 with the field).
func requireSigner(ctx context.Context, signer string) error {
	if !common.IsHexAddress(signer) {
		_, err := principal(ctx)
		return err
	}
	return requireGrant(ctx, common.HexToAddress(signer), signer)
}

// requireGrant allows the call only for a caller granted signer; shown is how the signer
// is named in the refusal.
func requireGrant(ctx context.Context, signer common.Address, shown string) error {
	p, err := principal(ctx)
	if err != nil {
		return err
	}
	if !p.CanUse(signer) {
		return v1.ErrorPermissionDenied("caller %s is not granted signer %s", p.ID, shown)
	}
	return nil
}

// requireAdmin allows the call only for a caller with the admin grant.
func requireAdmin(ctx context.Context) error {
	p, err := principal(ctx)
	if err != nil {
		return err
	}
	if !p.Admin {
		return v1.ErrorPermissionDenied("caller %s has no admin permission", p.ID)
	}
	return nil
}

// requireAdminFor allows an operator's call on signer only for a caller with the admin grant
// that is also granted the signer: an admin key limited to some signers acts on those alone,
// as it sees those alone.
func requireAdminFor(ctx context.Context, signer string) error {
	if err := requireAdmin(ctx); err != nil {
		return err
	}
	return requireSigner(ctx, signer)
}

// granted reports whether the caller is granted signer (a signer that does not parse is
// not).
func granted(ctx context.Context, signer string) bool {
	p, ok := domain.PrincipalFrom(ctx)
	return ok && common.IsHexAddress(signer) && p.CanUse(common.HexToAddress(signer))
}
