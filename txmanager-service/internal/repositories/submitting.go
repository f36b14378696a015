package repositories

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// SubmittingRepository implements submitting.Store (queries/submitting.sql). Each write is one
// autocommitted, fenced statement.
type SubmittingRepository struct{ chainScoped }

// NewSubmittingRepository builds the repository on the pool.
func NewSubmittingRepository(pool *pgxpool.Pool, chain services.ChainID) *SubmittingRepository {
	return &SubmittingRepository{newChainScoped(pool, chain)}
}

// ListAllocated implements submitting.Store.
func (r *SubmittingRepository) ListAllocated(ctx context.Context, signer string, from uint64, limit int) ([]submitting.AllocatedTx, error) {
	rows, err := r.q.ListAllocated(ctx, sqlcdb.ListAllocatedParams{ChainID: r.chainID, Signer: signer, FromNonce: int64(from), MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list allocated: %w", err)
	}
	// Every row is the signer's: its address is parsed once.
	signerAddr := common.HexToAddress(signer)
	out := make([]submitting.AllocatedTx, len(rows))
	for i, row := range rows {
		intent, err := intentFromFields(intentPayloadFields{hasTo: row.HasTo, to: row.IntentTo, value: row.IntentValue, data: row.IntentData,
			gasLimit: row.IntentGasLimit, effectiveGasLimit: row.EffectiveGasLimit, maxFee: row.IntentMaxFee, maxTip: row.IntentMaxTip})
		if err != nil {
			return nil, fmt.Errorf("list allocated: payload of %s: %w", row.TxID, err)
		}
		out[i] = submitting.AllocatedTx{ID: row.TxID, Signer: signerAddr, Nonce: uint64(row.Nonce),
			Intent: intent.Intent, EffectiveGasLimit: intent.EffectiveGasLimit}
	}
	return out, nil
}

// AllocationCursor implements submitting.Store.
func (r *SubmittingRepository) AllocationCursor(ctx context.Context, signer string) (uint64, error) {
	next, err := r.q.AllocationCursor(ctx, sqlcdb.AllocationCursorParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, fmt.Errorf("allocation cursor: %w", err)
	}
	return uint64(next), nil
}

// MarkSigned implements submitting.Store.
func (r *SubmittingRepository) MarkSigned(ctx context.Context, lease domain.Lease, attempts []pipeline.SignedAttempt, resubmitAfter time.Duration) ([]uuid.UUID, error) {
	p := sqlcdb.MarkSignedParams{ResubmitAfterSeconds: resubmitAfter.Seconds()}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, a := range attempts {
		p.TxIds = append(p.TxIds, a.TxID.String())
		p.TxHashes = append(p.TxHashes, a.Hash.Hex())
		p.Nonces = append(p.Nonces, int64(a.Nonce))
		p.MaxFees = append(p.MaxFees, a.MaxFee.String())
		p.MaxTips = append(p.MaxTips, a.MaxTip.String())
		p.BaseFees = append(p.BaseFees, weiOrEmpty(a.BaseFee))
		p.GasLimits = append(p.GasLimits, int64(a.GasLimit))
		p.RawTxs = append(p.RawTxs, a.Raw)
	}
	row, err := r.q.MarkSigned(ctx, p)
	if _, err := fencedOutcome(lease, "signed attempts", row.LeaseHeld, int64(len(row.SignedIds)), err); err != nil {
		return nil, err
	}
	return row.SignedIds, nil
}

// NextResubmitIn implements submitting.Store.
func (r *SubmittingRepository) NextResubmitIn(ctx context.Context, signer string) (time.Duration, bool, error) {
	row, err := r.q.NextResubmitIn(ctx, sqlcdb.NextResubmitInParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, false, fmt.Errorf("next resubmission: %w", err)
	}
	return time.Duration(row.Seconds * float64(time.Second)), row.AnyUnmined, nil
}

// ListResubmitDue implements submitting.Store.
func (r *SubmittingRepository) ListResubmitDue(ctx context.Context, signer string, limit int) ([]submitting.DueResubmit, error) {
	rows, err := r.q.ListResubmitDue(ctx, sqlcdb.ListResubmitDueParams{ChainID: r.chainID, Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list resubmit due: %w", err)
	}
	out := make([]submitting.DueResubmit, 0, len(rows))
	for _, row := range rows {
		d := submitting.DueResubmit{TxID: row.TxID, Current: common.HexToHash(row.TxHash.String), Raw: row.RawTx, Kind: pipeline.AttemptKind(row.Kind),
			SubState: domain.SubState(row.SubState)}
		if d.IntentGasLimit, err = decodeGas(row.IntentGasLimit); err != nil {
			return nil, err
		}
		if d.AdmittedGasLimit, err = decodeGas(row.EffectiveGasLimit); err != nil {
			return nil, err
		}
		d.AdmittedGasLimit = max(d.AdmittedGasLimit, d.IntentGasLimit)
		d.MaxFee, _ = new(big.Int).SetString(row.MaxFee, 10)
		d.MaxTip, _ = new(big.Int).SetString(row.MaxTip, 10)
		if row.IntentMaxFee != "" {
			if d.IntentMaxFee, err = decodeWei(row.IntentMaxFee); err != nil {
				return nil, err
			}
		}
		if row.IntentMaxTip != "" {
			if d.IntentMaxTip, err = decodeWei(row.IntentMaxTip); err != nil {
				return nil, err
			}
		}
		for _, h := range row.AttemptHashes {
			d.AllHashes = append(d.AllHashes, common.HexToHash(h))
		}
		out = append(out, d)
	}
	return out, nil
}

// ClaimResubmits implements submitting.Store.
func (r *SubmittingRepository) ClaimResubmits(ctx context.Context, lease domain.Lease, txIDs []uuid.UUID, resubmitAfter time.Duration) ([]uuid.UUID, error) {
	p := sqlcdb.ClaimResubmitsParams{TxIds: make([]string, len(txIDs)), ResubmitAfterSeconds: resubmitAfter.Seconds()}
	for i, id := range txIDs {
		p.TxIds[i] = id.String()
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.ClaimResubmits(ctx, p)
	if _, err := fencedOutcome(lease, "resubmit claim", row.LeaseHeld, int64(len(row.ClaimedIds)), err); err != nil {
		return nil, err
	}
	return row.ClaimedIds, nil
}

// RecordReplacements implements submitting.Store.
func (r *SubmittingRepository) RecordReplacements(ctx context.Context, lease domain.Lease, replacements []submitting.Replacement) ([]uuid.UUID, error) {
	var p sqlcdb.RecordReplacementsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, rp := range replacements {
		a := rp.Attempt
		p.TxIds = append(p.TxIds, a.TxID.String())
		p.Replaced = append(p.Replaced, rp.Replaced.Hex())
		p.TxHashes = append(p.TxHashes, a.Hash.Hex())
		p.Nonces = append(p.Nonces, int64(a.Nonce))
		p.Kinds = append(p.Kinds, string(a.Kind))
		p.MaxFees = append(p.MaxFees, a.MaxFee.String())
		p.MaxTips = append(p.MaxTips, a.MaxTip.String())
		p.BaseFees = append(p.BaseFees, weiOrEmpty(a.BaseFee))
		p.GasLimits = append(p.GasLimits, int64(a.GasLimit))
		p.RawTxs = append(p.RawTxs, a.Raw)
	}
	row, err := r.q.RecordReplacements(ctx, p)
	if _, err := fencedOutcome(lease, "replacement attempts", row.LeaseHeld, int64(len(row.UpdatedIds)), err); err != nil {
		return nil, err
	}
	return row.UpdatedIds, nil
}
