package repositories

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// StuckRepository implements stuck.Store (queries/stuck.sql). Each write is one
// autocommitted, fenced statement.
type StuckRepository struct{ chainScoped }

// NewStuckRepository builds the repository on the pool.
func NewStuckRepository(pool *pgxpool.Pool, chain services.ChainID) *StuckRepository {
	return &StuckRepository{newChainScoped(pool, chain)}
}

// HeadOfLine implements stuck.Store.
func (r *StuckRepository) HeadOfLine(ctx context.Context, signer string) (*stuck.HeadOfLineTx, error) {
	return r.resolvable(ctx, sqlcdb.GetResolvableParams{ChainID: r.chainID, Signer: pgtype.Text{String: signer, Valid: true}})
}

// Resolvable implements stuck.Store.
func (r *StuckRepository) Resolvable(ctx context.Context, txID uuid.UUID) (*stuck.HeadOfLineTx, error) {
	return r.resolvable(ctx, sqlcdb.GetResolvableParams{ChainID: r.chainID, TxID: pgtype.UUID{Bytes: txID, Valid: true}})
}

func (r *StuckRepository) resolvable(ctx context.Context, p sqlcdb.GetResolvableParams) (*stuck.HeadOfLineTx, error) {
	row, err := r.q.GetResolvable(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolvable tx: %w", err)
	}
	tx, err := toDomain(sqlcdb.ManagedTx{TxID: row.TxID, Signer: row.Signer, Nonce: row.Nonce, Payload: row.Payload, State: row.State})
	if err != nil {
		return nil, err
	}
	h := &stuck.HeadOfLineTx{
		TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce), State: domain.State(row.State),
		SubState: domain.SubState(row.SubState.String), SubmitAttempts: int(row.SubmitAttempts), LastError: row.LastError.String,
		CreatedAt: row.CreatedAt, Intent: tx.Intent, GasLimit: tx.EffectiveGasLimit, AdmittedGasLimit: max(tx.EffectiveGasLimit, tx.Intent.GasLimit),
		PendingDepth: int(row.PendingDepth),
		Since:        row.StuckSince,
	}
	if row.TxHash.Valid {
		hash := common.HexToHash(row.TxHash.String)
		h.TxHash = &hash
	}
	if row.IntentGasLimit > 0 {
		h.GasLimit = uint64(row.IntentGasLimit)
	}
	for _, hash := range row.AttemptHashes {
		h.AttemptHashes = append(h.AttemptHashes, common.HexToHash(hash))
	}
	if row.MaxFeePerGas != "" {
		h.MaxFee, _ = new(big.Int).SetString(row.MaxFeePerGas, 10)
	}
	if row.MaxPriorityFeePerGas != "" {
		h.MaxTip, _ = new(big.Int).SetString(row.MaxPriorityFeePerGas, 10)
	}
	return h, nil
}

// ClaimResolution implements stuck.Store.
func (r *StuckRepository) ClaimResolution(ctx context.Context, lease domain.Lease, claim stuck.Claim) (bool, error) {
	p := sqlcdb.ClaimStuckResolutionParams{
		TxID: claim.TxID, NewState: string(claim.NewState), SubState: text(string(claim.SubState)),
		Reason: claim.Reason, Action: string(claim.Action), CheckCurrent: claim.CheckCurrent, CurrentHash: hashOrEmpty(claim.PricedAgainst),
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.ClaimStuckResolution(ctx, p)
	n, err := fencedOutcome(lease, "stuck resolution claim", row.LeaseHeld, row.Updated, err)
	return n == 1, err
}
