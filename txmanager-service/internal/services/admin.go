package services

import (
	"context"
	"strings"
)

// AdminUseCase serves the operators' API.
type AdminUseCase struct {
	pipeline *Pipeline
}

// NewAdminUseCase wires the use case.
func NewAdminUseCase(pipeline *Pipeline) *AdminUseCase { return &AdminUseCase{pipeline: pipeline} }

// ResolveTx resolves one unmined transaction now with action ("" = the hook decides).
func (uc *AdminUseCase) ResolveTx(ctx context.Context, txID, action, reason string) (ResolutionAction, error) {
	id, err := parseTxID(txID)
	if err != nil {
		return "", err
	}
	var parsed ResolutionAction
	if strings.TrimSpace(action) != "" {
		if parsed, err = ParseResolutionAction(action); err != nil {
			return "", err
		}
	}
	if len(reason) > 500 {
		reason = reason[:500]
	}
	return uc.pipeline.ResolveTx(ctx, id, parsed, reason)
}
