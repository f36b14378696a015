package services

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
)

// ServiceEvent is an event beyond completions (migration 0023): a balance crossing a mark, a
// refill sent, an intent sent for approval. Position orders them; ID is the event's
// idempotency key.
type ServiceEvent struct {
	Position int64
	ID       string
	Kind     string
	ChainID  uint64
	Signer   common.Address
	Payload  json.RawMessage
	At       time.Time
}

// EventStore records and reads service events.
type EventStore interface {
	// Append records e inside sess (nil: a statement of its own); an ID recorded already
	// keeps its first record.
	Append(ctx context.Context, sess txmanager.Session, e ServiceEvent) error
	// ListAfter returns up to limit events after pos, in position order; signers, when not
	// nil, restricts them to those signers.
	ListAfter(ctx context.Context, pos int64, limit int, signers []string) ([]ServiceEvent, error)
	// Head is the last position taken.
	Head(ctx context.Context) (int64, error)
}

// eventPayload marshals an event's payload (every field marshals).
func eventPayload(v any) json.RawMessage {
	out, err := json.Marshal(v)
	if err != nil {
		return json.RawMessage(`{}`)
	}
	return out
}

// SignerEvent is an event about a signer, identified as the kind, the signer and a
// time-ordered id of its own, with data.
func SignerEvent(kind string, chainID uint64, signer common.Address, data map[string]any) ServiceEvent {
	return ServiceEvent{ID: kind + ":" + uuid.Must(uuid.NewV7()).String(), Kind: kind, ChainID: chainID, Signer: signer, Payload: eventPayload(data)}
}

// EventAppender records service events: the stores of the stages that raise them.
type EventAppender interface {
	AppendEvent(ctx context.Context, e ServiceEvent) error
}

// RecordEvent records e for webhook subscribers; a failure to record it is logged and the
// caller goes on (the condition's metric and alert still tell).
func RecordEvent(ctx context.Context, store EventAppender, logger *log.Helper, e ServiceEvent) {
	if err := store.AppendEvent(ctx, e); err != nil {
		logger.WithContext(ctx).Warnw("msg", "could not record an event for webhooks", "kind", e.Kind, "signer", e.Signer.Hex(), "error", err.Error())
	}
}
