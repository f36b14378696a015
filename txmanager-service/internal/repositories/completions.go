package repositories

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// CompletionRepository reads the completions feed.
type CompletionRepository struct {
	q *sqlcdb.Queries
}

// NewCompletionRepository builds the repository on the pool.
func NewCompletionRepository(pool *pgxpool.Pool) *CompletionRepository {
	return &CompletionRepository{q: sqlcdb.New(pool)}
}

// ListAfter implements services.CompletionStore.
func (r *CompletionRepository) ListAfter(ctx context.Context, pos services.FeedPosition, limit int, signers []string, chainID uint64) ([]services.Completion, error) {
	rows, err := r.q.ListCompletionsAfter(ctx, sqlcdb.ListCompletionsAfterParams{
		AfterPosition: int64(pos), PageSize: int32(limit), AllSigners: signers == nil, Signers: signers,
		AllChains: chainID == 0, ChainID: int64(chainID),
	})
	if err != nil {
		return nil, fmt.Errorf("list completions: %w", err)
	}
	out := make([]services.Completion, 0, len(rows))
	for _, row := range rows {
		c := services.Completion{
			ChainID:     uint64(row.ChainID),
			TxID:        row.TxID,
			Signer:      common.HexToAddress(row.Signer),
			Nonce:       uint64(row.Nonce),
			Status:      domain.State(row.Status),
			BlockNumber: uint64(row.BlockNumber.Int64),
			CompletedAt: row.CompletedAt,
			Placeholder: row.Placeholder,
			RequestID:   row.RequestID,
			Recovered:   row.Recovered,
			Reason:      row.Reason,
			Position:    services.FeedPosition(row.FeedPosition),
		}
		if row.TxHash.Valid {
			h := common.HexToHash(row.TxHash.String)
			c.TxHash = &h
		}
		cost := domain.ReceiptSummary{GasUsed: uint64(row.GasUsed)}
		if cost.EffectiveGasPrice, cost.L1Fee, err = decodeCost(row.EffectiveGasPrice, row.L1Fee); err != nil {
			return nil, fmt.Errorf("completion of %s: %w", row.TxID, err)
		}
		c.Fee = cost.Fee()
		out = append(out, c)
	}
	return out, nil
}

// State implements services.CompletionStore.
func (r *CompletionRepository) State(ctx context.Context) (services.FeedState, error) {
	row, err := r.q.FeedState(ctx)
	if err != nil {
		return services.FeedState{}, fmt.Errorf("feed state: %w", err)
	}
	return services.FeedState{LastPosition: services.FeedPosition(row.LastPosition), PrunedThrough: services.FeedPosition(row.PrunedThrough)}, nil
}

// LegacyPosition implements services.CompletionStore.
func (r *CompletionRepository) LegacyPosition(ctx context.Context, xid uint64, seq int64) (services.FeedPosition, error) {
	pos, err := r.q.PositionOfLegacyCursor(ctx, sqlcdb.PositionOfLegacyCursorParams{Xid: strconv.FormatUint(xid, 10), Seq: seq})
	if err != nil {
		return 0, fmt.Errorf("legacy cursor: %w", err)
	}
	return services.FeedPosition(pos), nil
}

// Pending implements services.CompletionStore.
func (r *CompletionRepository) Pending(ctx context.Context) (services.FeedState, bool, error) {
	row, err := r.q.FeedPending(ctx)
	if err != nil {
		return services.FeedState{}, false, fmt.Errorf("feed pending: %w", err)
	}
	return services.FeedState{LastPosition: services.FeedPosition(row.LastPosition), PrunedThrough: services.FeedPosition(row.PrunedThrough)}, row.Unpositioned, nil
}

// LockSequencer implements services.CompletionStore.
func (CompletionRepository) LockSequencer(ctx context.Context, sess txmanager.Session) (services.FeedState, error) {
	row, err := sqlcdb.New(sess.DB()).LockFeedSequencer(ctx)
	if err != nil {
		return services.FeedState{}, fmt.Errorf("lock feed sequencer: %w", err)
	}
	return services.FeedState{LastPosition: services.FeedPosition(row.LastPosition), PrunedThrough: services.FeedPosition(row.PrunedThrough)}, nil
}

// AssignPositions implements services.CompletionStore.
func (CompletionRepository) AssignPositions(ctx context.Context, sess txmanager.Session, last services.FeedPosition, limit int) (int, time.Duration, error) {
	row, err := sqlcdb.New(sess.DB()).AssignFeedPositions(ctx, sqlcdb.AssignFeedPositionsParams{LastPosition: int64(last), MaxRows: int32(limit)})
	if err != nil {
		return 0, 0, fmt.Errorf("assign feed positions: %w", err)
	}
	return int(row.Positioned), time.Duration(row.OldestWaitSeconds * float64(time.Second)), nil
}
