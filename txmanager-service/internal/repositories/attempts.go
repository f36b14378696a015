package repositories

import (
	"context"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AttemptRepository implements pipeline.AttemptStore (queries/attempts.sql): what every
// stage that signs or sends records about attempts. Each write is one autocommitted, fenced
// statement.
type AttemptRepository struct{ chainScoped }

// NewAttemptRepository builds the repository on the pool.
func NewAttemptRepository(pool *pgxpool.Pool, chain services.ChainID) *AttemptRepository {
	return &AttemptRepository{newChainScoped(pool, chain)}
}

// RecordBroadcasts implements pipeline.AttemptStore.
func (r *AttemptRepository) RecordBroadcasts(ctx context.Context, lease domain.Lease, outcomes []pipeline.BroadcastOutcome) error {
	var p sqlcdb.RecordBroadcastsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, o := range outcomes {
		p.TxIds = append(p.TxIds, o.TxID.String())
		p.TxHashes = append(p.TxHashes, o.TxHash.Hex())
		p.SubStates = append(p.SubStates, string(o.SubState))
		p.LastErrors = append(p.LastErrors, o.LastError)
	}
	row, err := r.q.RecordBroadcasts(ctx, p)
	_, err = fencedOutcome(lease, "broadcast outcome", row.LeaseHeld, row.Updated, err)
	return err
}

// RecordAttempt implements pipeline.AttemptStore.
func (r *AttemptRepository) RecordAttempt(ctx context.Context, lease domain.Lease, a pipeline.SignedAttempt, subState domain.SubState, resubmitAfter time.Duration) (bool, error) {
	return r.recordAttempt(ctx, lease, a, subState, resubmitAfter, false, "")
}

// RecordResolution implements pipeline.AttemptStore.
func (r *AttemptRepository) RecordResolution(ctx context.Context, lease domain.Lease, a pipeline.SignedAttempt, replaced *common.Hash, subState domain.SubState,
	resubmitAfter time.Duration) (bool, error) {
	return r.recordAttempt(ctx, lease, a, subState, resubmitAfter, true, hashOrEmpty(replaced))
}

// recordAttempt stores a; with checkCurrent, only while currentHash (” for none signed) is
// still the transaction's current attempt.
func (r *AttemptRepository) recordAttempt(ctx context.Context, lease domain.Lease, a pipeline.SignedAttempt, subState domain.SubState, resubmitAfter time.Duration,
	checkCurrent bool, currentHash string) (bool, error) {
	p := sqlcdb.RecordAttemptParams{
		TxHash: a.Hash.Hex(), TxID: a.TxID, Nonce: int64(a.Nonce), Kind: string(a.Kind),
		MaxFee: a.MaxFee.String(), MaxTip: a.MaxTip.String(), BaseFee: weiOrEmpty(a.BaseFee), GasLimit: int64(a.GasLimit), RawTx: a.Raw,
		SubState: text(string(subState)), ResubmitAfterSeconds: resubmitAfter.Seconds(),
		CheckCurrent: checkCurrent, CurrentHash: currentHash,
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.RecordAttempt(ctx, p)
	recorded, err := fencedOutcome(lease, "attempt", row.LeaseHeld, row.Updated, err)
	return recorded > 0, err
}

// hashOrEmpty is h as stored, ” for none.
func hashOrEmpty(h *common.Hash) string {
	if h == nil {
		return ""
	}
	return h.Hex()
}
