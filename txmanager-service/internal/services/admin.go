package services

import (
	"context"
	"strings"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// SignerStatus is what an operator wants to know about one signer.
type SignerStatus struct {
	Signer                  string
	LeaseOwner              string
	FencingToken            uint64
	LeaseExpiresAt          time.Time
	LeaseLive               bool
	NextNonce               uint64
	PendingDepth            int
	OldestPendingAgeSeconds float64
	StuckCount              int
}

// AdminStore reads what the admin API shows.
type AdminStore interface {
	SignerStatus(ctx context.Context, signer string) (SignerStatus, error)
	ListStuck(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
}

// AdminUseCase serves the operators' API.
type AdminUseCase struct {
	pipeline *Pipeline
	store    AdminStore
	nodes    *NodeRegistry
}

// NewAdminUseCase wires the use case.
func NewAdminUseCase(pipeline *Pipeline, store AdminStore, nodes *NodeRegistry) *AdminUseCase {
	return &AdminUseCase{pipeline: pipeline, store: store, nodes: nodes}
}

// ResolveTx resolves one unmined transaction now with action ("" = the hook decides).
func (uc *AdminUseCase) ResolveTx(ctx context.Context, txID, action, reason string) (domain.ResolutionAction, error) {
	id, err := parseTxID(txID)
	if err != nil {
		return "", err
	}
	var parsed domain.ResolutionAction
	if strings.TrimSpace(action) != "" {
		if parsed, err = domain.ParseResolutionAction(action); err != nil {
			return "", err
		}
	}
	if reason, err = domain.ParseReason("reason", reason, 500); err != nil {
		return "", err
	}
	return uc.pipeline.ResolveTx(ctx, id, parsed, reason)
}

// SignerStatus reports on one signer.
func (uc *AdminUseCase) SignerStatus(ctx context.Context, signer string) (SignerStatus, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return SignerStatus{}, err
	}
	status, err := uc.store.SignerStatus(ctx, addr.Hex())
	if err != nil {
		return SignerStatus{}, &domain.UnavailableError{Reason: "signer status", RetryAfter: time.Second, Err: err}
	}
	status.Signer = addr.Hex()
	return status, nil
}

// ListStuck lists STUCK transactions (of one signer when signer is not "").
func (uc *AdminUseCase) ListStuck(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error) {
	if signer != "" {
		addr, err := domain.ParseAddress("signer", signer)
		if err != nil {
			return nil, err
		}
		signer = addr.Hex()
	}
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, &domain.ValidationError{Field: "limit", Reason: "must be between 1 and 1000"}
	}
	txs, err := uc.store.ListStuck(ctx, signer, limit)
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "stuck list", RetryAfter: time.Second, Err: err}
	}
	return txs, nil
}

// ListNodes lists the registered service instances.
func (uc *AdminUseCase) ListNodes(ctx context.Context) ([]NodeInfo, error) {
	nodes, err := uc.nodes.List(ctx)
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "node registry", RetryAfter: time.Second, Err: err}
	}
	return nodes, nil
}
