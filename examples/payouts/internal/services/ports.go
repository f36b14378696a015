// Package services holds the payouts use cases (create and read a payout, relay the
// outbox to txmanager, apply txmanager's completions) and the ports they need. Every
// database transaction is opened here, through txmanager.Manager; repositories only run
// queries on the Session they are given.
package services

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/google/wire"

	"github.com/bionicotaku/lingo-utils/txmanager"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
)

// ProviderSet builds the use cases; the application binds TxManagerClient to the
// txmclient.Client it builds.
var ProviderSet = wire.NewSet(NewPayoutService, NewRelay, NewRelayConfig, NewCompletionApplier, NewSigner)

// The txmanager client is the TxManagerClient port as it is.
var _ TxManagerClient = (*txmclient.Client)(nil)

// PayoutRepository stores payouts.
type PayoutRepository interface {
	Insert(ctx context.Context, s txmanager.Session, p domain.NewPayout) (uuid.UUID, error)
	Get(ctx context.Context, s txmanager.Session, id uuid.UUID) (domain.Payout, error)
	IDByIdempotencyKey(ctx context.Context, s txmanager.Session, key string) (uuid.UUID, bool, error)
	IDByTxID(ctx context.Context, s txmanager.Session, txID string) (uuid.UUID, bool, error)
	RecordSubmission(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, txID string) error
	MarkRejected(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, reason string) error
	FinalizeByTxID(ctx context.Context, s txmanager.Session, c domain.Completion) (uuid.UUID, bool, error)
	FinalizeByOutboxID(ctx context.Context, s txmanager.Session, outboxID uuid.UUID, c domain.Completion) (uuid.UUID, bool, error)
	RecordApplied(ctx context.Context, s txmanager.Session, payoutID uuid.UUID, c domain.Completion) error
}

// OutboxRepository is the transactional outbox of payouts to send.
type OutboxRepository interface {
	Enqueue(ctx context.Context, s txmanager.Session, payoutID uuid.UUID) (uuid.UUID, error)
	ClaimDue(ctx context.Context, s txmanager.Session, limit int) ([]domain.OutboxItem, error)
	MarkSent(ctx context.Context, s txmanager.Session, id uuid.UUID, note string) error
	Defer(ctx context.Context, s txmanager.Session, id uuid.UUID, lastError string, backoff time.Duration) error
}

// TxManagerClient is the part of txmclient.Client the use cases call.
type TxManagerClient interface {
	Create(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error)
	Get(ctx context.Context, txID string) (*v1.Tx, error)
}

// Signer is the address payouts are paid from.
type Signer string
