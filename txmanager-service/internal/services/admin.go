package services

import (
	"context"
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
	// Quarantined: no nonce is allocated until recovery (or an operator) releases it.
	Quarantined bool
	// The rest of the signer's condition, as every node reads it.
	Condition SignerCondition
}

// AdminStore reads what the admin API shows.
type AdminStore interface {
	SignerStatus(ctx context.Context, signer string) (SignerStatus, error)
	ListStuck(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	// GetQuarantine returns the signer's quarantine record (zero, not quarantined, when none).
	GetQuarantine(ctx context.Context, signer string) (Quarantine, error)
	// RequestRelease records an operator's release of a live quarantine, which the signer's
	// recovery carries out; false when there was none.
	RequestRelease(ctx context.Context, signer, by, note string) (bool, error)
	// QuarantineNonceRanges summarises the quarantine's unknown nonces as runs by class.
	QuarantineNonceRanges(ctx context.Context, signer string) ([]NonceRangeSummary, error)
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
	// ScanBlocks bounds how far back a quarantined signer's unknown nonces nothing was
	// recorded for are looked for on chain when they are listed one by one.
	ScanBlocks uint64
	// ReleaseWait: how long a release waits for the signer's recovery to carry it out, so
	// its answer says how it ended.
	ReleaseWait time.Duration
	// RecoverByIntent: a quarantined signer is released by its recovery, without a person.
	RecoverByIntent bool
}

// AdminUseCase serves the operators' API.
type AdminUseCase struct {
	cfg      AdminConfig
	resolver TxResolver
	chain    SentFinder
	store    AdminStore
	nodes    *NodeRegistry
	signers  SignerDirectory
}

// NewAdminUseCase wires the use case.
func NewAdminUseCase(cfg AdminConfig, resolver TxResolver, chain SentFinder, store AdminStore, nodes *NodeRegistry, signers SignerDirectory) *AdminUseCase {
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
	status.Signer, status.Quarantined = addr.Hex(), status.Condition.Quarantined
	status.Condition.Signer = addr.Hex()
	return status, nil
}

// RecoverByIntent says how the use case's quarantines end (for the status it reports).
func (uc *AdminUseCase) RecoverByIntent() bool { return uc.cfg.RecoverByIntent }

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

// Quarantine is a signer's quarantine record: the unknown nonces summarised by what
// recovery made of them, and each nonce on request.
type Quarantine struct {
	Signer                  string
	Quarantined             bool
	DBNextNonce, ChainNonce uint64
	DetectedAt              time.Time
	DetectedBy              string
	ReleasedAt              *time.Time
	ReleasedBy, ReleaseNote string
	// RecordedTo: every unknown nonce below it has its transaction recorded; Recorded counts
	// the rows recovery recorded.
	RecordedTo uint64
	Recorded   int64
	// ReleaseRequestedAt and ReleaseRequestedBy: an operator released the signer; it serves
	// again once its recovery has recorded what the chain shows.
	ReleaseRequestedAt *time.Time
	ReleaseRequestedBy string
	// Ranges summarise the unknown nonces in runs of one class (NonceClass*).
	Ranges []NonceRangeSummary
	// Unknown lists the nonces one by one, when asked for.
	Unknown []UnknownNonce
	// NextFromNonce is where the listing goes on when Unknown is one page of several; 0
	// when it is complete.
	NextFromNonce uint64
}

// Classes of a quarantine's unknown nonces.
const (
	// NonceClassAdopted: recorded, and a retried create was answered with it.
	NonceClassAdopted = "ADOPTED"
	// NonceClassUnclaimed: recorded, adoptable until its window ends.
	NonceClassUnclaimed = "UNCLAIMED"
	// NonceClassExpired: recorded; its adoption window ended without an adopter.
	NonceClassExpired = "EXPIRED"
	// NonceClassNotRecorded: nothing recorded there: recovery has not reached it, or the
	// chain does not show a transaction there.
	NonceClassNotRecorded = "NOT_RECORDED"
)

// NonceRangeSummary is a run of consecutive unknown nonces in one class.
type NonceRangeSummary struct {
	Class       string
	First, Last uint64
	Count       uint64
}

// UnknownNonce is one nonce the chain holds and the database did not know.
type UnknownNonce struct {
	Nonce uint64
	// Tx is what the chain holds there (as recorded, or found on chain); nil when neither
	// shows it.
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
	// Tx is the transaction as recorded (hash, intent, block once mined).
	Tx SentTx
}

// maxUnknownListed bounds the nonces one listing page shows.
const maxUnknownListed = 256

// GetQuarantine reports the signer's quarantine, if any (live or released), with its
// unknown nonces summarised in ranges; with listNonces, also up to limit of them one by one
// from fromNonce on (limit 0 or above maxUnknownListed: maxUnknownListed): what the chain
// holds there and what recovery made of it.
func (uc *AdminUseCase) GetQuarantine(ctx context.Context, signer string, fromNonce uint64, limit int, listNonces bool) (Quarantine, error) {
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
	if q.Ranges, err = uc.store.QuarantineNonceRanges(ctx, addr.Hex()); err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "quarantine summary", RetryAfter: time.Second, Err: err}
	}
	if !listNonces {
		return q, nil
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
	recovered, err := uc.store.ListRecovered(ctx, addr.Hex(), nonces)
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "recovered transactions", RetryAfter: time.Second, Err: err}
	}
	// The nonces nothing was recorded for are looked for on chain, and those recorded before
	// their receipt was read (their block is not on the row yet).
	var unrecorded []uint64
	for _, n := range nonces {
		if row, ok := recovered[n]; !ok || row.Tx.BlockNumber == 0 {
			unrecorded = append(unrecorded, n)
		}
	}
	found := map[uint64]SentTx{}
	if len(unrecorded) > 0 {
		if found, err = uc.chain.SentTransactions(ctx, addr, unrecorded, uc.cfg.ScanBlocks); err != nil {
			return Quarantine{}, &domain.UnavailableError{Reason: "chain look-up of the unknown nonces", RetryAfter: time.Second, Err: err}
		}
	}
	for _, n := range nonces {
		u := UnknownNonce{Nonce: n}
		if row, ok := recovered[n]; ok {
			if tx, ok := found[n]; ok && row.Tx.BlockNumber == 0 && tx.Hash == row.Tx.Hash {
				row.Tx.BlockNumber = tx.BlockNumber
			}
			u.Recovered, u.Tx = &row, &row.Tx
		} else if tx, ok := found[n]; ok {
			u.Tx = &tx
		}
		q.Unknown = append(q.Unknown, u)
	}
	return q, nil
}

// ReleaseSigner ends the signer's quarantine at an operator's word. The release is carried
// out by the signer's recovery once it has recorded every transaction the chain shows at the
// unknown nonces (nonces the chain does not show are let go), so a lost request retried
// after the release is still answered with its transaction. It waits up to ReleaseWait for
// that and answers the quarantine as it then stands: released, with how many transactions
// were recorded, or still recording.
func (uc *AdminUseCase) ReleaseSigner(ctx context.Context, signer, note string) (Quarantine, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return Quarantine{}, err
	}
	if note, err = domain.ParseReason("note", note, 500); err != nil {
		return Quarantine{}, err
	}
	p, _ := domain.PrincipalFrom(ctx)
	requested, err := uc.store.RequestRelease(ctx, addr.Hex(), p.ID, note)
	if err != nil {
		return Quarantine{}, &domain.UnavailableError{Reason: "quarantine release", RetryAfter: time.Second, Err: err}
	}
	if !requested {
		return Quarantine{}, &domain.NotFoundError{What: "signer " + addr.Hex() + " is not quarantined"}
	}
	wait, cancel := context.WithTimeout(ctx, uc.cfg.ReleaseWait)
	defer cancel()
	for {
		q, err := uc.store.GetQuarantine(wait, addr.Hex())
		if err == nil && !q.Quarantined {
			break
		}
		select {
		case <-wait.Done():
		case <-time.After(200 * time.Millisecond):
			continue
		}
		break
	}
	return uc.GetQuarantine(ctx, addr.Hex(), 0, 0, false)
}
