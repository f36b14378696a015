package services

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Attempt is one signed attempt of a transaction as an operator reads it: its fees beside
// the base fee they were priced against.
type Attempt struct {
	Hash     common.Hash
	Kind     string
	MaxFee   *big.Int
	MaxTip   *big.Int
	BaseFee  *big.Int // nil: not known (signed before it was kept, or recovered from the chain)
	GasLimit uint64
	At       time.Time
}

// AuditEntry is one audit record in short, newest first on the console.
type AuditEntry struct {
	Seq     int64
	At      time.Time
	Actor   string
	Action  string
	Subject string
}

// ConsoleStore reads what the operator console shows beyond the admin API: each read is
// one index look-up or one bounded index range, whatever the tables hold.
type ConsoleStore interface {
	// SignerTxs is the signer's transactions below beforeNonce, highest nonce first.
	SignerTxs(ctx context.Context, chainID uint64, signer string, beforeNonce uint64, limit int) ([]domain.ManagedTx, error)
	// OpenTxs is the signer's unfinished transactions, lowest nonce first.
	OpenTxs(ctx context.Context, chainID uint64, signer string, limit int) ([]domain.ManagedTx, error)
	// Attempts is every attempt signed for the transaction, oldest first.
	Attempts(ctx context.Context, txID uuid.UUID) ([]Attempt, error)
	// CompletedAt is when the transaction's final state was written (nil: not final).
	CompletedAt(ctx context.Context, txID uuid.UUID) (*time.Time, error)
	// TxIDByHash finds the transaction any of whose attempts has the hash.
	TxIDByHash(ctx context.Context, hash common.Hash) (uuid.UUID, error)
	// TxsByRequestID finds the transactions of any signer that carry the request id.
	TxsByRequestID(ctx context.Context, requestID string, limit int) ([]domain.ManagedTx, error)
	// RecentAudit is the newest audit records, newest first.
	RecentAudit(ctx context.Context, limit int) ([]AuditEntry, error)
	// EndSession lists a console session as signed out until expires, when it would have
	// ended anyway; SessionEnded says whether it is listed. The list is every node's.
	EndSession(ctx context.Context, sessionID string, expires time.Time) error
	SessionEnded(ctx context.Context, sessionID string) (bool, error)
}
