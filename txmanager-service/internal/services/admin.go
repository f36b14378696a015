package services

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

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
	// Quarantined: no nonce is allocated until an operator releases the signer.
	Quarantined bool
}

// AdminStore reads what the admin API shows.
type AdminStore interface {
	SignerStatus(ctx context.Context, signer string) (SignerStatus, error)
	ListStuck(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	// GetQuarantine returns the signer's quarantine record (zero, not quarantined, when none).
	GetQuarantine(ctx context.Context, signer string) (Quarantine, error)
	// ReleaseQuarantine releases a live quarantine and reports whether there was one.
	ReleaseQuarantine(ctx context.Context, signer, by, note string) (bool, error)
	// ListRecovered returns the rows recovery recorded at the given nonces, by nonce.
	ListRecovered(ctx context.Context, signer string, nonces []uint64) (map[uint64]RecoveredRow, error)
}

// TxResolver resolves one unmined transaction now (the pipeline's stuck stage); action ""
// lets its hook decide.
type TxResolver interface {
	ResolveTx(ctx context.Context, txID uuid.UUID, action domain.ResolutionAction, reason string) (domain.ResolutionAction, error)
}

// AdminConfig tunes the admin use case.
type AdminConfig struct {
	// ScanBlocks bounds how far back a quarantined signer's unknown nonces are looked for.
	ScanBlocks uint64
}

// AdminUseCase serves the operators' API.
type AdminUseCase struct {
	cfg      AdminConfig
	resolver TxResolver
	chain    Chain
	store    AdminStore
	nodes    *NodeRegistry
	signers  SignerDirectory
}

// NewAdminUseCase wires the use case.
func NewAdminUseCase(cfg AdminConfig, resolver TxResolver, chain Chain, store AdminStore, nodes *NodeRegistry, signers SignerDirectory) *AdminUseCase {
	return &AdminUseCase{cfg: cfg, resolver: resolver, chain: chain, store: store, nodes: nodes, signers: signers}
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
	return uc.resolver.ResolveTx(ctx, id, parsed, reason)
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
	q, err := uc.store.GetQuarantine(ctx, addr.Hex())
	if err != nil {
		return SignerStatus{}, &domain.UnavailableError{Reason: "quarantine record", RetryAfter: time.Second, Err: err}
	}
	status.Signer, status.Quarantined = addr.Hex(), q.Quarantined
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

// Quarantine is a signer's quarantine record, with what the chain holds at each nonce the
// database does not know.
type Quarantine struct {
	Signer                  string
	Quarantined             bool
	DBNextNonce, ChainNonce uint64
	DetectedAt              time.Time
	DetectedBy              string
	ReleasedAt              *time.Time
	ReleasedBy, ReleaseNote string
	Unknown                 []UnknownNonce
	// NextFromNonce is where the listing goes on when Unknown is one page of several; 0
	// when it is complete.
	NextFromNonce uint64
}

// UnknownNonce is one nonce the chain holds and the database does not know.
type UnknownNonce struct {
	Nonce uint64
	// Tx is what the chain holds there; nil when the scanned blocks do not show it.
	Tx *SentTx
	// Recovered is the row recovery recorded for it (nil when none was recorded).
	Recovered *RecoveredRow
}

// RecoveredRow is a transaction recovery recorded at a lost nonce: adopted by a retried
// create (RequestID) or adoptable until UnclaimedUntil.
type RecoveredRow struct {
	TxID           uuid.UUID
	RequestID      string
	UnclaimedUntil *time.Time
}

// maxUnknownListed bounds the nonces one report looks up on chain; a longer listing is
// paged.
const maxUnknownListed = 256

// GetQuarantine reports the signer's quarantine, if any (live or released), with the
// contents of up to limit unknown nonces from fromNonce on (limit 0 or above
// maxUnknownListed: maxUnknownListed): what the chain holds there and what recovery made of
// it.
func (uc *AdminUseCase) GetQuarantine(ctx context.Context, signer string, fromNonce uint64, limit int) (Quarantine, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return Quarantine{}, err
	}
	q, err := uc.store.GetQuarantine(ctx, addr.Hex())
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "quarantine record", RetryAfter: time.Second, Err: err}
	}
	q.Signer = addr.Hex()
	if q.DetectedAt.IsZero() {
		return q, nil // never quarantined
	}
	if limit <= 0 || limit > maxUnknownListed {
		limit = maxUnknownListed
	}
	var nonces []uint64
	n := max(fromNonce, q.DBNextNonce)
	for ; n < q.ChainNonce && len(nonces) < limit; n++ {
		nonces = append(nonces, n)
	}
	if n < q.ChainNonce {
		q.NextFromNonce = n
	}
	found, err := uc.chain.SentTransactions(ctx, addr, nonces, uc.cfg.ScanBlocks)
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "chain look-up of the unknown nonces", RetryAfter: time.Second, Err: err}
	}
	recovered, err := uc.store.ListRecovered(ctx, addr.Hex(), nonces)
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "recovered transactions", RetryAfter: time.Second, Err: err}
	}
	for _, n := range nonces {
		u := UnknownNonce{Nonce: n}
		if tx, ok := found[n]; ok {
			u.Tx = &tx
		}
		if row, ok := recovered[n]; ok {
			u.Recovered = &row
		}
		q.Unknown = append(q.Unknown, u)
	}
	return q, nil
}

// ReleaseSigner ends the signer's quarantine: an operator looked at the unknown nonces.
func (uc *AdminUseCase) ReleaseSigner(ctx context.Context, signer, note string) (Quarantine, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return Quarantine{}, err
	}
	if note, err = domain.ParseReason("note", note, 500); err != nil {
		return Quarantine{}, err
	}
	p, _ := domain.PrincipalFrom(ctx)
	released, err := uc.store.ReleaseQuarantine(ctx, addr.Hex(), p.ID, note)
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "quarantine release", RetryAfter: time.Second, Err: err}
	}
	if !released {
		return Quarantine{}, fmt.Errorf("%w: signer %s is not quarantined", domain.ErrNotFound, addr.Hex())
	}
	return uc.GetQuarantine(ctx, addr.Hex(), 0, 0)
}
