package repositories

import (
	"context"
	"errors"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AdminRepository implements services.AdminStore.
type AdminRepository struct{ chainScoped }

// NewAdminRepository builds the repository on the pool.
func NewAdminRepository(pool *pgxpool.Pool, chain services.ChainID) *AdminRepository {
	return &AdminRepository{newChainScoped(pool, chain)}
}

// SignerStatus implements services.AdminStore.
func (r *AdminRepository) SignerStatus(ctx context.Context, signer string) (services.SignerStatus, error) {
	row, err := r.q.SignerStatus(ctx, sqlcdb.SignerStatusParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return services.SignerStatus{}, fmt.Errorf("signer status: %w", err)
	}
	return services.SignerStatus{
		Signer: signer, LeaseOwner: row.OwnerNode, FencingToken: uint64(row.FencingToken), LeaseExpiresAt: row.LeaseExpiresAt,
		LeaseLive: row.LeaseLive, NextNonce: uint64(row.NextNonce), PendingDepth: int(row.PendingDepth),
		OldestPendingAgeSeconds: row.OldestPendingAgeSeconds, StuckCount: int(row.StuckCount),
		Condition: services.SignerCondition{
			Signer: signer, Quarantined: row.Quarantined, UnrecordedNonces: uint64(max(row.UnrecordedNonces, 0)), ReleaseRequested: row.ReleaseRequested,
			SigningFailingSince: row.SigningFailingSince, SigningError: row.SigningError,
			Unsigned: int(row.Unsigned), OldestUnsignedAgeSeconds: row.OldestUnsignedAgeSeconds,
		},
	}, nil
}

// ListStuck implements services.AdminStore.
func (r *AdminRepository) ListStuck(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ListStuck(ctx, sqlcdb.ListStuckParams{ChainID: r.chainID, AnySigner: signer == "", Signer: signer, PageSize: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list stuck: %w", err)
	}
	return toDomainRows(rows)
}

// GetQuarantine implements services.AdminStore.
func (r *AdminRepository) GetQuarantine(ctx context.Context, signer string) (services.Quarantine, error) {
	row, err := r.q.GetQuarantine(ctx, sqlcdb.GetQuarantineParams{ChainID: r.chainID, Signer: signer})
	if errors.Is(err, pgx.ErrNoRows) {
		return services.Quarantine{}, nil
	}
	if err != nil {
		return services.Quarantine{}, fmt.Errorf("get quarantine: %w", err)
	}
	return services.Quarantine{
		Quarantined: row.ReleasedAt == nil, DBNextNonce: uint64(row.DbNextNonce), ChainNonce: uint64(row.ChainNonce),
		DetectedAt: row.DetectedAt, DetectedBy: row.DetectedBy, ReleasedAt: row.ReleasedAt, ReleasedBy: row.ReleasedBy, ReleaseNote: row.ReleaseNote,
		RecordedTo: uint64(row.RecordedTo), Recorded: row.RecordedCount, ReleaseRequestedAt: row.ReleaseRequestedAt, ReleaseRequestedBy: row.ReleaseRequestedBy,
	}, nil
}

// RequestRelease implements services.AdminStore.
func (r *AdminRepository) RequestRelease(ctx context.Context, signer, by, note string) (bool, error) {
	n, err := r.q.RequestRelease(ctx, sqlcdb.RequestReleaseParams{ChainID: r.chainID, Signer: signer, ReleasedBy: text(by), Note: text(note)})
	if err != nil {
		return false, fmt.Errorf("request quarantine release: %w", err)
	}
	return n > 0, nil
}

// QuarantineNonceRanges implements services.AdminStore.
func (r *AdminRepository) QuarantineNonceRanges(ctx context.Context, signer string) ([]services.NonceRangeSummary, error) {
	rows, err := r.q.QuarantineNonceRanges(ctx, sqlcdb.QuarantineNonceRangesParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return nil, fmt.Errorf("quarantine nonce ranges: %w", err)
	}
	ranges := make([]services.NonceRangeSummary, 0, len(rows))
	for _, row := range rows {
		ranges = append(ranges, services.NonceRangeSummary{Class: row.Class, First: uint64(row.FirstNonce), Last: uint64(row.LastNonce), Count: uint64(row.Nonces)})
	}
	return ranges, nil
}

// ListRecovered implements services.AdminStore.
func (r *AdminRepository) ListRecovered(ctx context.Context, signer string, nonces []uint64) (map[uint64]services.RecoveredRow, error) {
	p := sqlcdb.ListRecoveredParams{ChainID: r.chainID, Signer: signer, Nonces: make([]int64, len(nonces))}
	for i, n := range nonces {
		p.Nonces[i] = int64(n)
	}
	rows, err := r.q.ListRecovered(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list recovered: %w", err)
	}
	out := make(map[uint64]services.RecoveredRow, len(rows))
	for _, row := range rows {
		intent, err := decodeIntent(row.Payload)
		if err != nil {
			return nil, fmt.Errorf("recovered transaction %s: %w", row.TxID, err)
		}
		sent := services.SentTx{Hash: common.HexToHash(row.TxHash), Nonce: uint64(row.Nonce), To: intent.To, Value: intent.Value, Data: intent.Data,
			Gas: intent.EffectiveGasLimit, BlockNumber: uint64(row.BlockNumber)}
		out[uint64(row.Nonce)] = services.RecoveredRow{TxID: row.TxID, RequestID: row.RequestID, UnclaimedUntil: row.UnclaimedUntil, Tx: sent}
	}
	return out, nil
}
