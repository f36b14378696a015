package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ReconcileRepository implements reconcile.Store (queries/reconcile.sql, and the quarantine
// it shares with allocation). Each write is one autocommitted, fenced statement.
type ReconcileRepository struct {
	q       *sqlcdb.Queries
	chainID int64
}

// NewReconcileRepository builds the repository on the pool.
func NewReconcileRepository(pool *pgxpool.Pool, chain services.ChainID) *ReconcileRepository {
	return &ReconcileRepository{q: sqlcdb.New(pool), chainID: chain.Int64()}
}

// SignerChainCheck implements reconcile.Store.
func (r *ReconcileRepository) SignerChainCheck(ctx context.Context, signer string) (int64, bool, error) {
	row, err := r.q.SignerChainCheck(ctx, sqlcdb.SignerChainCheckParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, false, fmt.Errorf("signer chain check: %w", err)
	}
	return row.NextNonce, row.Quarantined, nil
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
	out := make([]domain.ManagedTx, 0, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out = append(out, tx)
	}
	return out, nil
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
