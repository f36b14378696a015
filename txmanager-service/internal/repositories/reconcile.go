package repositories

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ReconcileRepository implements reconcile.Store (queries/reconcile.sql, and the quarantine
// it shares with allocation). Each write is one autocommitted, fenced statement.
type ReconcileRepository struct{ chainScoped }

// NewReconcileRepository builds the repository on the pool.
func NewReconcileRepository(pool *pgxpool.Pool, chain services.ChainID) *ReconcileRepository {
	return &ReconcileRepository{newChainScoped(pool, chain)}
}

// SignerChainCheck implements reconcile.Store.
func (r *ReconcileRepository) SignerChainCheck(ctx context.Context, signer string) (reconcile.SignerCheck, error) {
	row, err := r.q.SignerChainCheck(ctx, sqlcdb.SignerChainCheckParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return reconcile.SignerCheck{}, fmt.Errorf("signer chain check: %w", err)
	}
	check := reconcile.SignerCheck{NextNonce: row.NextNonce, UnclaimedExpired: row.UnclaimedExpired}
	if row.QuarantinedFrom.Valid && row.QuarantinedTo.Valid {
		rec := &reconcile.Recovery{
			NonceRange:       reconcile.NonceRange{From: uint64(row.QuarantinedFrom.Int64), To: uint64(row.QuarantinedTo.Int64)},
			RecoveryProgress: reconcile.RecoveryProgress{RecordedTo: uint64(row.RecordedTo)},
			Recorded:         row.RecordedCount.Int64, ReleaseRequested: row.ReleaseRequested,
		}
		if row.ScanFromBlock.Valid {
			from := uint64(row.ScanFromBlock.Int64)
			rec.ScanFrom = &from
		}
		if row.DetectedAt != nil {
			rec.DetectedAt = *row.DetectedAt
		}
		check.Quarantine = rec
	}
	return check, nil
}

// Quarantine implements reconcile.Store.
func (r *ReconcileRepository) Quarantine(ctx context.Context, lease domain.Lease, dbNext, chainNext uint64) (bool, error) {
	return quarantine(ctx, r.q, r.chainID, lease, dbNext, chainNext)
}

// ListNonceTaken implements reconcile.Store.
func (r *ReconcileRepository) ListNonceTaken(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ListNonceTaken(ctx, sqlcdb.ListNonceTakenParams{ChainID: r.chainID, Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list nonce taken: %w", err)
	}
	return toDomainRows(rows)
}

// FailNonceTaken implements reconcile.Store.
func (r *ReconcileRepository) FailNonceTaken(ctx context.Context, lease domain.Lease, tx domain.ManagedTx, reason string) error {
	p := sqlcdb.FailNonceTakenParams{TxID: tx.ID, Reason: text(reason)}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.FailNonceTaken(ctx, p)
	_, err = fencedOutcome(lease, "nonce taken", row.LeaseHeld, row.Updated, err)
	return err
}

// LowestOpenNonce implements reconcile.Store.
func (r *ReconcileRepository) LowestOpenNonce(ctx context.Context, signer string) (int64, error) {
	nonce, err := r.q.LowestOpenNonce(ctx, sqlcdb.LowestOpenNonceParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, fmt.Errorf("lowest open nonce: %w", err)
	}
	return nonce, nil
}

// InsertPlaceholders implements reconcile.Store.
func (r *ReconcileRepository) InsertPlaceholders(ctx context.Context, lease domain.Lease, txs []domain.ManagedTx) (int, error) {
	var p sqlcdb.InsertPlaceholdersParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, tx := range txs {
		payload, err := encodePayload(tx)
		if err != nil {
			return 0, err
		}
		p.TxIds = append(p.TxIds, tx.ID.String())
		p.Nonces = append(p.Nonces, int64(tx.Nonce))
		p.IntentHashes = append(p.IntentHashes, tx.Fingerprint[:])
		p.Payloads = append(p.Payloads, string(payload))
	}
	row, err := r.q.InsertPlaceholders(ctx, p)
	return fencedOutcome(lease, "placeholders", row.LeaseHeld, row.Inserted, err)
}

// RecordRecovered implements reconcile.Store.
func (r *ReconcileRepository) RecordRecovered(ctx context.Context, lease domain.Lease, txs []reconcile.RecoveredTx, unclaimedUntil time.Time, resubmitAfter time.Duration,
	progress reconcile.RecoveryProgress) (int, error) {
	p := sqlcdb.RecordRecoveredParams{UnclaimedUntil: unclaimedUntil, ResubmitAfterSeconds: resubmitAfter.Seconds(), RecordedTo: int64(progress.RecordedTo)}
	if progress.ScanFrom != nil {
		p.ScanFromBlock = int64(*progress.ScanFrom)
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, rec := range txs {
		payload, err := encodePayload(rec.Tx)
		if err != nil {
			return 0, err
		}
		key := domain.CreateRequest{Signer: rec.Tx.Signer, Intent: rec.Tx.Intent}.RecoveryKey()
		a := rec.Attempt
		p.TxIds = append(p.TxIds, rec.Tx.ID.String())
		p.Nonces = append(p.Nonces, int64(rec.Tx.Nonce))
		p.Payloads = append(p.Payloads, string(payload))
		p.IntentHashes = append(p.IntentHashes, rec.Tx.Fingerprint[:])
		p.RecoveryKeys = append(p.RecoveryKeys, key[:])
		p.TxHashes = append(p.TxHashes, a.Hash.Hex())
		p.MaxFees = append(p.MaxFees, a.MaxFee.String())
		p.MaxTips = append(p.MaxTips, a.MaxTip.String())
		p.GasLimits = append(p.GasLimits, int64(a.GasLimit))
		p.RawTxs = append(p.RawTxs, a.Raw)
	}
	row, err := r.q.RecordRecovered(ctx, p)
	return fencedOutcome(lease, "recovered transactions", row.LeaseHeld, row.Inserted, err)
}

// RecoveryAnchors implements reconcile.Store.
func (r *ReconcileRepository) RecoveryAnchors(ctx context.Context, signer string, below uint64, limit int) ([]reconcile.RecoveryAnchor, error) {
	rows, err := r.q.RecoveryAnchors(ctx, sqlcdb.RecoveryAnchorsParams{ChainID: r.chainID, Signer: signer, Below: int64(below), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("recovery anchors: %w", err)
	}
	anchors := make([]reconcile.RecoveryAnchor, 0, len(rows))
	for _, row := range rows {
		anchors = append(anchors, reconcile.RecoveryAnchor{Nonce: uint64(row.Nonce), Hash: common.HexToHash(row.TxHash), Block: uint64(row.BlockNumber)})
	}
	return anchors, nil
}

// FinishRecovery implements reconcile.Store.
func (r *ReconcileRepository) FinishRecovery(ctx context.Context, lease domain.Lease, chainNonce uint64, note string) (bool, error) {
	p := sqlcdb.FinishRecoveryParams{ChainNonce: int64(chainNonce), ReleasedBy: recoveryReleaser, Note: note}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.FinishRecovery(ctx, p)
	n, err := fencedOutcome(lease, "recovery release", row.LeaseHeld, row.Released, err)
	return n > 0, err
}

// recoveryReleaser names the recovery in a quarantine's release record, where an operator's
// id stands when a person asked for the release.
const recoveryReleaser = "recovery (adopt-by-intent)"

// maxExpiredPerCall bounds one ExpireUnclaimed statement.
const maxExpiredPerCall = 1000

// ExpireUnclaimed implements reconcile.Store.
func (r *ReconcileRepository) ExpireUnclaimed(ctx context.Context, lease domain.Lease) (int, error) {
	p := sqlcdb.ExpireUnclaimedParams{MaxRows: maxExpiredPerCall}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.ExpireUnclaimed(ctx, p)
	return fencedOutcome(lease, "adoption window", row.LeaseHeld, row.Expired, err)
}
