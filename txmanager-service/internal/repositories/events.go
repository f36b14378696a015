package repositories

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// EventRepository implements services.EventStore and services.FundingStore (migration 0023).
type EventRepository struct {
	q *sqlcdb.Queries
}

// NewEventRepository builds the repository on the pool.
func NewEventRepository(pool *pgxpool.Pool) *EventRepository {
	return &EventRepository{q: sqlcdb.New(pool)}
}

// Append implements services.EventStore.
func (r *EventRepository) Append(ctx context.Context, sess txmanager.Session, e services.ServiceEvent) error {
	return appendEvent(ctx, inSession(r.q, sess), e)
}

func appendEvent(ctx context.Context, q *sqlcdb.Queries, e services.ServiceEvent) error {
	if err := q.AppendEvent(ctx, sqlcdb.AppendEventParams{EventID: e.ID, Kind: e.Kind, ChainID: int64(e.ChainID), Signer: e.Signer.Hex(), Payload: e.Payload}); err != nil {
		return fmt.Errorf("append event %s: %w", e.ID, err)
	}
	return nil
}

// ListAfter implements services.EventStore.
func (r *EventRepository) ListAfter(ctx context.Context, pos int64, limit int, signers []string) ([]services.ServiceEvent, error) {
	rows, err := r.q.ListEventsAfter(ctx, sqlcdb.ListEventsAfterParams{AfterPosition: pos, AllSigners: signers == nil, Signers: signers, PageSize: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	out := make([]services.ServiceEvent, len(rows))
	for i, row := range rows {
		out[i] = services.ServiceEvent{Position: row.Position, ID: row.EventID, Kind: row.Kind, ChainID: uint64(row.ChainID), Signer: common.HexToAddress(row.Signer),
			Payload: json.RawMessage(row.Payload), At: row.At}
	}
	return out, nil
}

// Head implements services.EventStore.
func (r *EventRepository) Head(ctx context.Context) (int64, error) {
	head, err := r.q.EventHead(ctx)
	if err != nil {
		return 0, fmt.Errorf("event head: %w", err)
	}
	return head, nil
}

// Put implements services.FundingStore.
func (r *EventRepository) Put(ctx context.Context, f domain.Funding, by string) error {
	p := sqlcdb.PutFundingParams{ChainID: int64(f.ChainID), Signer: f.Signer.Hex(), LowWater: f.LowWater.String(), HighWater: f.HighWater.String(), UpdatedBy: by}
	if f.Treasury != nil {
		p.Treasury = pgtype.Text{String: f.Treasury.Hex(), Valid: true}
	}
	if err := r.q.PutFunding(ctx, p); err != nil {
		return fmt.Errorf("funding of %s: %w", f.Signer.Hex(), err)
	}
	return nil
}

// Get implements services.FundingStore.
func (r *EventRepository) Get(ctx context.Context, chainID uint64, signer common.Address) (domain.Funding, error) {
	row, err := r.q.GetFunding(ctx, sqlcdb.GetFundingParams{ChainID: int64(chainID), Signer: signer.Hex()})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Funding{}, &domain.NotFoundError{What: "no funding marks for signer " + signer.Hex()}
	}
	if err != nil {
		return domain.Funding{}, fmt.Errorf("funding of %s: %w", signer.Hex(), err)
	}
	return fundingOf(row)
}

// List implements services.FundingStore.
func (r *EventRepository) List(ctx context.Context, chainID uint64) ([]domain.Funding, error) {
	rows, err := r.q.ListFunding(ctx, int64(chainID))
	if err != nil {
		return nil, fmt.Errorf("list funding: %w", err)
	}
	out := make([]domain.Funding, 0, len(rows))
	for _, row := range rows {
		f, err := fundingOf(sqlcdb.GetFundingRow(row))
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// Delete implements services.FundingStore.
func (r *EventRepository) Delete(ctx context.Context, chainID uint64, signer common.Address) (bool, error) {
	n, err := r.q.DeleteFunding(ctx, sqlcdb.DeleteFundingParams{ChainID: int64(chainID), Signer: signer.Hex()})
	if err != nil {
		return false, fmt.Errorf("delete funding of %s: %w", signer.Hex(), err)
	}
	return n == 1, nil
}

// Mark implements services.FundingStore.
func (r *EventRepository) Mark(ctx context.Context, sess txmanager.Session, chainID uint64, signer common.Address, balance *big.Int) (services.BalanceMark, error) {
	q := sqlcdb.New(sess.DB())
	before, err := q.LockFunding(ctx, sqlcdb.LockFundingParams{ChainID: int64(chainID), Signer: signer.Hex()})
	if err != nil {
		return services.BalanceMark{}, fmt.Errorf("lock the funding of %s: %w", signer.Hex(), err)
	}
	row, err := q.MarkBalance(ctx, sqlcdb.MarkBalanceParams{ChainID: int64(chainID), Signer: signer.Hex(), Balance: balance.String()})
	if err != nil {
		return services.BalanceMark{}, fmt.Errorf("mark the balance of %s: %w", signer.Hex(), err)
	}
	m := services.BalanceMark{WasLow: before == "low", Low: row.After == "low", Refills: row.Refills, RefillInFlight: row.RefillInFlight}
	if m.LowWater, err = decodeWei(row.LowWater); err != nil {
		return m, err
	}
	if m.HighWater, err = decodeWei(row.HighWater); err != nil {
		return m, err
	}
	if row.Treasury != "" {
		t := common.HexToAddress(row.Treasury)
		m.Treasury = &t
	}
	return m, nil
}

// RecordRefill implements services.FundingStore.
func (r *EventRepository) RecordRefill(ctx context.Context, sess txmanager.Session, chainID uint64, signer common.Address, txID uuid.UUID, n int64) (bool, error) {
	rows, err := sqlcdb.New(sess.DB()).RecordRefill(ctx, sqlcdb.RecordRefillParams{RefillTxID: pgtype.UUID{Bytes: txID, Valid: true}, ChainID: int64(chainID), Signer: signer.Hex(), Refills: n})
	if err != nil {
		return false, fmt.Errorf("record the refill of %s: %w", signer.Hex(), err)
	}
	return rows == 1, nil
}

// AppendEvent implements services.AllocationStore.
func (r AllocationRepository) AppendEvent(ctx context.Context, sess txmanager.Session, e services.ServiceEvent) error {
	return appendEvent(ctx, sqlcdb.New(sess.DB()), e)
}

func fundingOf(row sqlcdb.GetFundingRow) (domain.Funding, error) {
	f := domain.Funding{ChainID: uint64(row.ChainID), Signer: common.HexToAddress(row.Signer), Low: row.State == "low", Refills: row.Refills,
		UpdatedAt: row.UpdatedAt, UpdatedBy: row.UpdatedBy}
	var err error
	if f.LowWater, err = decodeWei(row.LowWater); err != nil {
		return f, err
	}
	if f.HighWater, err = decodeWei(row.HighWater); err != nil {
		return f, err
	}
	if row.Treasury != "" {
		t := common.HexToAddress(row.Treasury)
		f.Treasury = &t
	}
	if row.LastBalance != "" {
		if f.LastBalance, err = decodeWei(row.LastBalance); err != nil {
			return f, err
		}
	}
	if row.RefillTxID.Valid {
		id := uuid.UUID(row.RefillTxID.Bytes)
		f.RefillTxID = &id
	}
	return f, nil
}
