package repositories

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// WebhookRepository implements services.SubscriptionStore on webhook_subscription
// (migration 0022).
type WebhookRepository struct {
	q *sqlcdb.Queries
}

// NewWebhookRepository builds the repository on the pool.
func NewWebhookRepository(pool *pgxpool.Pool) *WebhookRepository {
	return &WebhookRepository{q: sqlcdb.New(pool)}
}

// Insert implements services.SubscriptionStore.
func (r *WebhookRepository) Insert(ctx context.Context, sess txmanager.Session, s domain.Subscription, secret string, eventCursor int64) (int64, error) {
	filter, err := json.Marshal(s.Filter)
	if err != nil {
		return 0, fmt.Errorf("subscription filter: %w", err)
	}
	cursor, err := sqlcdb.New(sess.DB()).InsertSubscription(ctx, sqlcdb.InsertSubscriptionParams{SubscriptionID: s.ID, Url: s.URL, Secret: secret, Filter: filter,
		Description: s.Description, Cursor: s.Cursor, EventCursor: eventCursor, CreatedBy: s.CreatedBy, BatchSize: int32(s.BatchSize)})
	if err != nil {
		return 0, fmt.Errorf("insert subscription: %w", err)
	}
	return cursor, nil
}

// Get implements services.SubscriptionStore.
func (r *WebhookRepository) Get(ctx context.Context, id uuid.UUID) (domain.Subscription, error) {
	row, err := r.q.GetSubscription(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Subscription{}, &domain.NotFoundError{What: "no webhook subscription " + id.String()}
	}
	if err != nil {
		return domain.Subscription{}, fmt.Errorf("subscription %s: %w", id, err)
	}
	return subscriptionOf(row)
}

// List implements services.SubscriptionStore.
func (r *WebhookRepository) List(ctx context.Context) ([]domain.Subscription, error) {
	rows, err := r.q.ListSubscriptions(ctx)
	if err != nil {
		return nil, fmt.Errorf("list subscriptions: %w", err)
	}
	out := make([]domain.Subscription, 0, len(rows))
	for _, row := range rows {
		s, err := subscriptionOf(sqlcdb.GetSubscriptionRow(row))
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Count implements services.SubscriptionStore.
func (r *WebhookRepository) Count(ctx context.Context) (int64, error) {
	n, err := r.q.CountSubscriptions(ctx)
	if err != nil {
		return 0, fmt.Errorf("count subscriptions: %w", err)
	}
	return n, nil
}

// CountDead implements services.SubscriptionStore.
func (r *WebhookRepository) CountDead(ctx context.Context) (int64, error) {
	n, err := r.q.CountDeadSubscriptions(ctx)
	if err != nil {
		return 0, fmt.Errorf("count dead subscriptions: %w", err)
	}
	return n, nil
}

// SetState implements services.SubscriptionStore.
func (r *WebhookRepository) SetState(ctx context.Context, sess txmanager.Session, id uuid.UUID, state domain.SubscriptionState) (bool, error) {
	n, err := sqlcdb.New(sess.DB()).SetSubscriptionState(ctx, sqlcdb.SetSubscriptionStateParams{State: string(state), SubscriptionID: id})
	if err != nil {
		return false, fmt.Errorf("subscription %s to %s: %w", id, state, err)
	}
	return n == 1, nil
}

// Replay implements services.SubscriptionStore.
func (r *WebhookRepository) Replay(ctx context.Context, sess txmanager.Session, id uuid.UUID, cursor int64) (int64, bool, error) {
	stored, err := sqlcdb.New(sess.DB()).ReplaySubscription(ctx, sqlcdb.ReplaySubscriptionParams{Cursor: cursor, SubscriptionID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("replay subscription %s: %w", id, err)
	}
	return stored, true, nil
}

// Delete implements services.SubscriptionStore.
func (r *WebhookRepository) Delete(ctx context.Context, sess txmanager.Session, id uuid.UUID) (bool, error) {
	n, err := sqlcdb.New(sess.DB()).DeleteSubscription(ctx, id)
	if err != nil {
		return false, fmt.Errorf("delete subscription %s: %w", id, err)
	}
	return n == 1, nil
}

// Claim implements services.SubscriptionStore.
func (r *WebhookRepository) Claim(ctx context.Context, node string, maxNew int, lease time.Duration) ([]services.ClaimedSubscription, error) {
	rows, err := r.q.ClaimSubscriptions(ctx, sqlcdb.ClaimSubscriptionsParams{NodeID: node, MaxNew: int32(maxNew), LeaseSeconds: lease.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("claim subscriptions: %w", err)
	}
	out := make([]services.ClaimedSubscription, 0, len(rows))
	for _, row := range rows {
		var f domain.SubscriptionFilter
		if err := json.Unmarshal([]byte(row.Filter), &f); err != nil {
			return nil, fmt.Errorf("subscription %s filter: %w", row.SubscriptionID, err)
		}
		out = append(out, services.ClaimedSubscription{ID: row.SubscriptionID, URL: row.Url, Secret: []byte(row.Secret), Filter: f, Cursor: row.Cursor,
			EventCursor: row.EventCursor, Token: row.FencingToken, BatchSize: int(row.BatchSize)})
	}
	return out, nil
}

// Advance implements services.SubscriptionStore.
func (r *WebhookRepository) Advance(ctx context.Context, c services.ClaimedSubscription, node string, cursor int64, delivered int, clearFailure bool) (bool, error) {
	n, err := r.q.AdvanceSubscription(ctx, sqlcdb.AdvanceSubscriptionParams{Cursor: cursor, Delivered: int64(delivered), ClearFailure: clearFailure, SubscriptionID: c.ID,
		NodeID: pgtype.Text{String: node, Valid: true}, FencingToken: c.Token})
	if err != nil {
		return false, fmt.Errorf("advance subscription %s: %w", c.ID, err)
	}
	return n == 1, nil
}

// AdvanceEvents implements services.SubscriptionStore.
func (r *WebhookRepository) AdvanceEvents(ctx context.Context, c services.ClaimedSubscription, node string, cursor int64, delivered int, clearFailure bool) (bool, error) {
	n, err := r.q.AdvanceEventCursor(ctx, sqlcdb.AdvanceEventCursorParams{Cursor: cursor, Delivered: int64(delivered), ClearFailure: clearFailure, SubscriptionID: c.ID,
		NodeID: pgtype.Text{String: node, Valid: true}, FencingToken: c.Token})
	if err != nil {
		return false, fmt.Errorf("advance the events of subscription %s: %w", c.ID, err)
	}
	return n == 1, nil
}

// Failed implements services.SubscriptionStore.
func (r *WebhookRepository) Failed(ctx context.Context, c services.ClaimedSubscription, node, reason string, deadAfter time.Duration) (domain.SubscriptionState, bool, error) {
	if len(reason) > 500 {
		reason = reason[:500]
	}
	state, err := r.q.RecordDeliveryFailure(ctx, sqlcdb.RecordDeliveryFailureParams{LastError: reason, DeadAfterSeconds: deadAfter.Seconds(), SubscriptionID: c.ID,
		NodeID: pgtype.Text{String: node, Valid: true}, FencingToken: c.Token})
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("record delivery failure of %s: %w", c.ID, err)
	}
	return domain.SubscriptionState(state), true, nil
}

// Release implements services.SubscriptionStore.
func (r *WebhookRepository) Release(ctx context.Context, node string) error {
	if err := r.q.ReleaseSubscriptions(ctx, pgtype.Text{String: node, Valid: true}); err != nil {
		return fmt.Errorf("release subscriptions: %w", err)
	}
	return nil
}

func subscriptionOf(row sqlcdb.GetSubscriptionRow) (domain.Subscription, error) {
	s := domain.Subscription{ID: row.SubscriptionID, URL: row.Url, State: domain.SubscriptionState(row.State), Cursor: row.Cursor, CreatedAt: row.CreatedAt,
		CreatedBy: row.CreatedBy, LastSuccessAt: row.LastSuccessAt, FailingSince: row.FailingSince, LastError: row.LastError, Description: row.Description,
		Delivered: row.Delivered, Owner: row.OwnerNode, BatchSize: int(row.BatchSize)}
	if err := json.Unmarshal([]byte(row.Filter), &s.Filter); err != nil {
		return s, fmt.Errorf("subscription %s filter: %w", row.SubscriptionID, err)
	}
	return s, nil
}
