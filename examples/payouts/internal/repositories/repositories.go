// Package repositories is the PostgreSQL adapter of the payouts service: sqlc queries run
// on the txmanager.Session of the transaction the service layer opened, the pool, and the
// embedded migrations.
package repositories

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/google/wire"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories/payoutsdb"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
)

// ProviderSet gives the service layer its repositories, the pool and the migrator.
var ProviderSet = wire.NewSet(
	NewPool, NewMigrator, NewPayoutRepository, NewOutboxRepository,
	wire.Bind(new(services.PayoutRepository), new(*PayoutRepository)),
	wire.Bind(new(services.OutboxRepository), new(*OutboxRepository)),
)

// NewPool opens the service's pool; the cleanup closes it.
func NewPool(bc *conf.Bootstrap) (*pgxpool.Pool, func(), error) {
	cfg, err := pgxpool.ParseConfig(bc.Database.DSN)
	if err != nil {
		return nil, nil, fmt.Errorf("database dsn: %w", err)
	}
	cfg.MaxConns = bc.Database.MaxConns
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("open database pool: %w", err)
	}
	return pool, pool.Close, nil
}

// PayoutRepository stores payouts and the completions applied to them.
type PayoutRepository struct{}

// NewPayoutRepository builds the repository.
func NewPayoutRepository() *PayoutRepository { return &PayoutRepository{} }

// Insert stores a new PENDING payout.
func (*PayoutRepository) Insert(ctx context.Context, s txmanager.Session, p domain.NewPayout) (uuid.UUID, error) {
	id, err := payoutsdb.New(s.DB()).InsertPayout(ctx, payoutsdb.InsertPayoutParams{
		IdempotencyKey: text(p.IdempotencyKey), ToAddress: p.To, Amount: p.AmountWei,
	})
	if err != nil {
		return uuid.Nil, fmt.Errorf("insert payout: %w", err)
	}
	return id, nil
}

// Get reads a payout; domain.ErrPayoutNotFound when there is none.
func (*PayoutRepository) Get(ctx context.Context, s txmanager.Session, id uuid.UUID) (domain.Payout, error) {
	row, err := payoutsdb.New(s.DB()).GetPayout(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Payout{}, fmt.Errorf("payout %s: %w", id, domain.ErrPayoutNotFound)
	}
	if err != nil {
		return domain.Payout{}, fmt.Errorf("read payout %s: %w", id, err)
	}
	return domain.Payout{
		ID: row.ID, IdempotencyKey: row.IdempotencyKey.String, To: row.ToAddress, AmountWei: row.Amount,
		Status: domain.Status(row.Status), TxID: row.TxID.String, TxHash: row.TxHash.String,
		FailureReason: row.FailureReason.String, CreatedAt: row.CreatedAt, UpdatedAt: row.UpdatedAt,
	}, nil
}

// IDByIdempotencyKey finds the payout created with key.
func (*PayoutRepository) IDByIdempotencyKey(ctx context.Context, s txmanager.Session, key string) (uuid.UUID, bool, error) {
	return optionalID(payoutsdb.New(s.DB()).PayoutIDByIdempotencyKey(ctx, key))
}

// IDByTxID finds the payout paid by txID.
func (*PayoutRepository) IDByTxID(ctx context.Context, s txmanager.Session, txID string) (uuid.UUID, bool, error) {
	return optionalID(payoutsdb.New(s.DB()).PayoutIDByTxID(ctx, txID))
}

// RecordSubmission stores the transaction txmanager created for the payout. A different
// transaction already recorded would be a second payment: it is an error, not an update.
func (*PayoutRepository) RecordSubmission(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, txID string) error {
	n, err := payoutsdb.New(s.DB()).RecordSubmission(ctx, payoutsdb.RecordSubmissionParams{ID: payoutID, TxID: txID})
	if err != nil {
		return fmt.Errorf("record tx %s on payout %s: %w", txID, payoutID, err)
	}
	if n == 0 {
		return fmt.Errorf("record tx %s on payout %s: the payout holds another transaction", txID, payoutID)
	}
	return nil
}

// MarkRejected fails a payout txmanager refused (no transaction exists).
func (*PayoutRepository) MarkRejected(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, reason string) error {
	if _, err := payoutsdb.New(s.DB()).MarkRejected(ctx, payoutsdb.MarkRejectedParams{ID: payoutID, Reason: text(reason)}); err != nil {
		return fmt.Errorf("reject payout %s: %w", payoutID, err)
	}
	return nil
}

// FinalizeByTxID moves the unfinished payout paid by c.TxID to its final status.
func (*PayoutRepository) FinalizeByTxID(ctx context.Context, s txmanager.Session, c domain.Completion) (uuid.UUID, bool, error) {
	status, reason := c.FinalStatus()
	return optionalID(payoutsdb.New(s.DB()).FinalizeByTxID(ctx, payoutsdb.FinalizeByTxIDParams{
		TxID: c.TxID, Status: string(status), TxHash: text(c.TxHash), FailureReason: text(reason),
	}))
}

// FinalizeByOutboxID moves the unfinished payout of the outbox row (the requestId) to its
// final status, recording the transaction the relay had not recorded yet.
func (*PayoutRepository) FinalizeByOutboxID(ctx context.Context, s txmanager.Session, outboxID uuid.UUID, c domain.Completion) (uuid.UUID, bool, error) {
	status, reason := c.FinalStatus()
	return optionalID(payoutsdb.New(s.DB()).FinalizeByOutboxID(ctx, payoutsdb.FinalizeByOutboxIDParams{
		OutboxID: outboxID, TxID: c.TxID, Status: string(status), TxHash: text(c.TxHash), FailureReason: text(reason),
	}))
}

// RecordApplied writes the inbox row of an applied completion; a second one for the same
// transaction fails (txmanager.ErrConflict).
func (*PayoutRepository) RecordApplied(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, c domain.Completion) error {
	status, _ := c.FinalStatus()
	err := payoutsdb.New(s.DB()).InsertAppliedCompletion(ctx, payoutsdb.InsertAppliedCompletionParams{
		TxID: c.TxID, PayoutID: payoutID, Status: string(status), FeedCursor: c.Cursor,
	})
	if err != nil {
		return fmt.Errorf("record completion of tx %s: %w", c.TxID, err)
	}
	return nil
}

// OutboxRepository is the payouts' transactional outbox.
type OutboxRepository struct{}

// NewOutboxRepository builds the repository.
func NewOutboxRepository() *OutboxRepository { return &OutboxRepository{} }

// Enqueue adds the payout's outbox row; its id is the requestId the relay sends.
func (*OutboxRepository) Enqueue(ctx context.Context, s txmanager.Session, payoutID uuid.UUID) (uuid.UUID, error) {
	id, err := payoutsdb.New(s.DB()).EnqueueOutbox(ctx, payoutID)
	if err != nil {
		return uuid.Nil, fmt.Errorf("enqueue payout %s: %w", payoutID, err)
	}
	return id, nil
}

// ClaimDue locks up to limit unsent rows that are due, skipping rows another relay holds.
func (*OutboxRepository) ClaimDue(ctx context.Context, s txmanager.Session, limit int) ([]domain.OutboxItem, error) {
	rows, err := payoutsdb.New(s.DB()).ClaimDueOutbox(ctx, int32(min(limit, 10_000)))
	if err != nil {
		return nil, fmt.Errorf("claim outbox rows: %w", err)
	}
	items := make([]domain.OutboxItem, len(rows))
	for i, r := range rows {
		items[i] = domain.OutboxItem{ID: r.ID, PayoutID: r.PayoutID, Attempts: int(r.Attempts), To: r.ToAddress, AmountWei: r.Amount}
	}
	return items, nil
}

// MarkSent closes the row; note records why when it was closed without a transaction.
func (*OutboxRepository) MarkSent(ctx context.Context, s txmanager.Session, id uuid.UUID, note string) error {
	n, err := payoutsdb.New(s.DB()).MarkOutboxSent(ctx, payoutsdb.MarkOutboxSentParams{ID: id, LastError: text(note)})
	if err != nil {
		return fmt.Errorf("mark outbox row %s sent: %w", id, err)
	}
	if n == 0 {
		// The row is locked by this transaction, so nobody else can have sent it.
		return fmt.Errorf("mark outbox row %s sent: it was already sent", id)
	}
	return nil
}

// Defer leaves the row unsent and due again after backoff.
func (*OutboxRepository) Defer(ctx context.Context, s txmanager.Session, id uuid.UUID, lastError string, backoff time.Duration) error {
	_, err := payoutsdb.New(s.DB()).DeferOutbox(ctx, payoutsdb.DeferOutboxParams{ID: id, LastError: lastError, BackoffSeconds: backoff.Seconds()})
	if err != nil {
		return fmt.Errorf("defer outbox row %s: %w", id, err)
	}
	return nil
}

func optionalID(id uuid.UUID, err error) (uuid.UUID, bool, error) {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return uuid.Nil, false, nil
	case err != nil:
		return uuid.Nil, false, err
	}
	return id, true, nil
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// loggerHelper is the repositories' logger.
func loggerHelper(logger log.Logger) *log.Helper {
	return log.NewHelper(log.With(logger, "component", "repositories"))
}
