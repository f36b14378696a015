package repositories

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ConsoleRepository reads what the operator console shows, across chains.
type ConsoleRepository struct {
	q *sqlcdb.Queries
}

// NewConsoleRepository builds the repository on the pool.
func NewConsoleRepository(pool *pgxpool.Pool) *ConsoleRepository {
	return &ConsoleRepository{q: sqlcdb.New(pool)}
}

// SignerTxs implements services.ConsoleStore.
func (r *ConsoleRepository) SignerTxs(ctx context.Context, chainID uint64, signer string, beforeNonce uint64, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ConsoleSignerTxs(ctx, sqlcdb.ConsoleSignerTxsParams{ChainID: int64(chainID), Signer: signer, BeforeNonce: int64(min(beforeNonce, 1<<62)), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("signer's transactions: %w", err)
	}
	return toDomainRows(rows)
}

// OpenTxs implements services.ConsoleStore.
func (r *ConsoleRepository) OpenTxs(ctx context.Context, chainID uint64, signer string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ConsoleOpenTxs(ctx, sqlcdb.ConsoleOpenTxsParams{ChainID: int64(chainID), Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("signer's queue: %w", err)
	}
	return toDomainRows(rows)
}

// Attempts implements services.ConsoleStore.
func (r *ConsoleRepository) Attempts(ctx context.Context, txID uuid.UUID) ([]services.Attempt, error) {
	rows, err := r.q.ConsoleTxAttempts(ctx, txID)
	if err != nil {
		return nil, fmt.Errorf("attempts: %w", err)
	}
	out := make([]services.Attempt, 0, len(rows))
	for _, row := range rows {
		a := services.Attempt{Hash: common.HexToHash(row.TxHash), Kind: row.Kind, GasLimit: uint64(row.GasLimit), At: row.CreatedAt}
		if a.MaxFee, err = decodeWei(row.MaxFee); err != nil {
			return nil, fmt.Errorf("attempt %s: %w", row.TxHash, err)
		}
		if a.MaxTip, err = decodeWei(row.MaxTip); err != nil {
			return nil, fmt.Errorf("attempt %s: %w", row.TxHash, err)
		}
		if row.BaseFee != "" {
			if a.BaseFee, err = decodeWei(row.BaseFee); err != nil {
				return nil, fmt.Errorf("attempt %s: %w", row.TxHash, err)
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// CompletedAt implements services.ConsoleStore.
func (r *ConsoleRepository) CompletedAt(ctx context.Context, txID uuid.UUID) (*time.Time, error) {
	at, err := r.q.ConsoleTxCompletedAt(ctx, txID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("completion: %w", err)
	}
	return &at, nil
}

// TxIDByHash implements services.ConsoleStore.
func (r *ConsoleRepository) TxIDByHash(ctx context.Context, hash common.Hash) (uuid.UUID, error) {
	id, err := r.q.ConsoleTxIDByHash(ctx, hash.Hex())
	if errors.Is(err, pgx.ErrNoRows) {
		return uuid.Nil, domain.ErrNotFound
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("transaction by hash: %w", err)
	}
	return id, nil
}

// TxsByRequestID implements services.ConsoleStore.
func (r *ConsoleRepository) TxsByRequestID(ctx context.Context, requestID string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ConsoleTxsByRequestID(ctx, sqlcdb.ConsoleTxsByRequestIDParams{RequestID: pgtype.Text{String: requestID, Valid: true}, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("transactions by request id: %w", err)
	}
	return toDomainRows(rows)
}

// RecentAudit implements services.ConsoleStore.
func (r *ConsoleRepository) RecentAudit(ctx context.Context, limit int) ([]services.AuditEntry, error) {
	rows, err := r.q.ConsoleRecentAudit(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("recent audit records: %w", err)
	}
	out := make([]services.AuditEntry, len(rows))
	for i, row := range rows {
		out[i] = services.AuditEntry{Seq: row.Seq, At: row.At, Actor: row.Actor, Action: row.Action, Subject: row.Subject}
	}
	return out, nil
}

// EndSession implements services.ConsoleStore.
func (r *ConsoleRepository) EndSession(ctx context.Context, sessionID string, expires time.Time) error {
	if err := r.q.EndConsoleSession(ctx, sqlcdb.EndConsoleSessionParams{SessionID: sessionID, ExpiresAt: expires}); err != nil {
		return fmt.Errorf("end console session: %w", err)
	}
	return nil
}

// SessionEnded implements services.ConsoleStore.
func (r *ConsoleRepository) SessionEnded(ctx context.Context, sessionID string) (bool, error) {
	ended, err := r.q.ConsoleSessionEnded(ctx, sessionID)
	if err != nil {
		return false, fmt.Errorf("console session ended: %w", err)
	}
	return ended, nil
}
