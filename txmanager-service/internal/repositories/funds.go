package repositories

import (
	"context"
	"fmt"
	"math/big"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// FundsRepository implements services.FundsStore.
type FundsRepository struct{ chainScoped }

// NewFundsRepository builds the repository on the pool.
func NewFundsRepository(pool *pgxpool.Pool, chain services.ChainID) *FundsRepository {
	return &FundsRepository{newChainScoped(pool, chain)}
}

// UnminedCost implements services.FundsStore.
func (r *FundsRepository) UnminedCost(ctx context.Context, signer string, fromNonce uint64, fallbackFee *big.Int) (*big.Int, error) {
	text, err := r.q.UnminedCost(ctx, sqlcdb.UnminedCostParams{ChainID: r.chainID, Signer: signer, FromNonce: int64(fromNonce), FallbackFee: fallbackFee.String()})
	if err != nil {
		return nil, fmt.Errorf("unmined cost of %s: %w", signer, err)
	}
	cost, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return nil, fmt.Errorf("unmined cost of %s: not an integer: %q", signer, text)
	}
	return cost, nil
}

// UnminedDataSizes implements services.DataSizeStore.
func (r *FundsRepository) UnminedDataSizes(ctx context.Context, signer string, fromNonce uint64) (map[int]int64, error) {
	rows, err := r.q.UnminedDataSizes(ctx, sqlcdb.UnminedDataSizesParams{ChainID: r.chainID, Signer: signer, FromNonce: int64(fromNonce)})
	if err != nil {
		return nil, fmt.Errorf("unmined data sizes of %s: %w", signer, err)
	}
	sizes := make(map[int]int64, len(rows))
	for _, row := range rows {
		sizes[int(row.DataBytes)] = row.Txs
	}
	return sizes, nil
}
