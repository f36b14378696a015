package repositories

import (
	"context"
	"fmt"
	"strconv"

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
func (r *CompletionRepository) ListAfter(ctx context.Context, pos services.FeedPosition, limit int, signers []string) ([]services.Completion, error) {
	rows, err := r.q.ListCompletionsAfter(ctx, sqlcdb.ListCompletionsAfterParams{
		AfterXid: strconv.FormatUint(pos.Xid, 10), AfterSeq: pos.Seq, PageSize: int32(limit),
		AllSigners: signers == nil, Signers: signers,
	})
	if err != nil {
		return nil, fmt.Errorf("list completions: %w", err)
	}
	out := make([]services.Completion, 0, len(rows))
	for _, row := range rows {
		xid, err := strconv.ParseUint(row.Xid, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("completion xid %q: %w", row.Xid, err)
		}
		c := services.Completion{
			TxID:        row.TxID,
			Signer:      common.HexToAddress(row.Signer),
			Nonce:       uint64(row.Nonce),
			Status:      domain.State(row.Status),
			BlockNumber: uint64(row.BlockNumber.Int64),
			CompletedAt: row.CompletedAt,
			Position:    services.FeedPosition{Xid: xid, Seq: row.Seq},
		}
		if row.TxHash.Valid {
			h := common.HexToHash(row.TxHash.String)
			c.TxHash = &h
		}
		out = append(out, c)
	}
	return out, nil
}
