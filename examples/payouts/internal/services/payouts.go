package services

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
)

// PayoutService creates and reads payouts.
type PayoutService struct {
	tx      txmanager.Manager
	payouts PayoutRepository
	outbox  OutboxRepository
}

// NewPayoutService builds the use case.
func NewPayoutService(tx txmanager.Manager, payouts PayoutRepository, outbox OutboxRepository) *PayoutService {
	return &PayoutService{tx: tx, payouts: payouts, outbox: outbox}
}

// NewSigner reads the paying address from the configuration.
func NewSigner(bc *conf.Bootstrap) Signer { return Signer(bc.Payouts.Signer) }

// Create stores the payout and its outbox row in one transaction (the outbox pattern): the
// relay sends only payouts that exist, and every payout that exists is sent. created is
// false when the Idempotency-Key named an earlier identical payout.
func (s *PayoutService) Create(ctx context.Context, req domain.NewPayout) (p domain.Payout, created bool, err error) {
	opts := txmanager.DefaultOptions().WithTraceName("payouts.create")
	// Two creates with one new key race to insert it; the loser's unique violation
	// (ErrConflict) means the winner committed, so a second pass finds and returns it.
	for attempt := 1; ; attempt++ {
		err = s.tx.WithinTx(ctx, opts, func(ctx context.Context, sess txmanager.Session) error {
			if req.IdempotencyKey != "" {
				id, found, err := s.payouts.IDByIdempotencyKey(ctx, sess, req.IdempotencyKey)
				if err != nil {
					return err
				}
				if found {
					if p, err = s.payouts.Get(ctx, sess, id); err != nil {
						return err
					}
					if !req.Same(p) {
						return fmt.Errorf("key %q: %w", req.IdempotencyKey, domain.ErrIdempotencyConflict)
					}
					created = false
					return nil
				}
			}
			id, err := s.payouts.Insert(ctx, sess, req)
			if err != nil {
				return err
			}
			if _, err := s.outbox.Enqueue(ctx, sess, id); err != nil {
				return err
			}
			p, err = s.payouts.Get(ctx, sess, id)
			created = true
			return err
		})
		if err == nil || attempt == 2 || req.IdempotencyKey == "" || !errors.Is(err, txmanager.ErrConflict) {
			break
		}
	}
	if err != nil {
		return domain.Payout{}, false, fmt.Errorf("create payout: %w", err)
	}
	return p, created, nil
}

// Get reads a payout.
func (s *PayoutService) Get(ctx context.Context, id uuid.UUID) (domain.Payout, error) {
	var p domain.Payout
	err := s.tx.WithinReadOnlyTx(ctx, txmanager.ReadOnlyOptions().WithTraceName("payouts.get"),
		func(ctx context.Context, sess txmanager.Session) error {
			var err error
			p, err = s.payouts.Get(ctx, sess, id)
			return err
		})
	if err != nil {
		return domain.Payout{}, fmt.Errorf("get payout: %w", err)
	}
	return p, nil
}
