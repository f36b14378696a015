package repositories

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// PipelineRepository implements services.PipelineStore. Each write is one autocommitted,
// fenced statement.
type PipelineRepository struct {
	q       *sqlcdb.Queries
	chainID int64
}

// NewPipelineRepository builds the repository on the pool.
func NewPipelineRepository(pool *pgxpool.Pool, chain services.ChainID) *PipelineRepository {
	return &PipelineRepository{q: sqlcdb.New(pool), chainID: chain.Int64()}
}

// fencedOutcome turns a fenced statement's (lease_held, updated) into FENCED or a count.
func fencedOutcome(lease domain.Lease, write string, leaseHeld bool, updated int64, err error) (int, error) {
	if err != nil {
		return 0, fmt.Errorf("%s: %w", write, err)
	}
	if !leaseHeld {
		return 0, fencedError(lease, write)
	}
	return int(updated), nil
}

func text(s string) pgtype.Text { return pgtype.Text{String: s, Valid: s != ""} }

// ListAllocated implements services.PipelineStore.
func (r *PipelineRepository) ListAllocated(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ListAllocated(ctx, sqlcdb.ListAllocatedParams{ChainID: r.chainID, Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list allocated: %w", err)
	}
	out := make([]domain.ManagedTx, 0, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out = append(out, tx)
	}
	return out, nil
}

// MarkSigned implements services.PipelineStore.
func (r *PipelineRepository) MarkSigned(ctx context.Context, lease domain.Lease, attempts []services.SignedAttempt, resubmitAfter time.Duration) error {
	p := sqlcdb.MarkSignedParams{ResubmitAfterSeconds: resubmitAfter.Seconds()}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, a := range attempts {
		p.TxIds = append(p.TxIds, a.TxID.String())
		p.TxHashes = append(p.TxHashes, a.Hash.Hex())
		p.Nonces = append(p.Nonces, int64(a.Nonce))
		p.MaxFees = append(p.MaxFees, a.MaxFee.String())
		p.MaxTips = append(p.MaxTips, a.MaxTip.String())
		p.GasLimits = append(p.GasLimits, int64(a.GasLimit))
		p.RawTxs = append(p.RawTxs, a.Raw)
	}
	row, err := r.q.MarkSigned(ctx, p)
	_, err = fencedOutcome(lease, "signed attempts", row.LeaseHeld, row.Updated, err)
	return err
}

// RecordBroadcasts implements services.PipelineStore.
func (r *PipelineRepository) RecordBroadcasts(ctx context.Context, lease domain.Lease, outcomes []services.BroadcastOutcome) error {
	var p sqlcdb.RecordBroadcastsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, o := range outcomes {
		p.TxIds = append(p.TxIds, o.TxID.String())
		p.SubStates = append(p.SubStates, o.SubState)
		p.LastErrors = append(p.LastErrors, o.LastError)
	}
	row, err := r.q.RecordBroadcasts(ctx, p)
	_, err = fencedOutcome(lease, "broadcast outcome", row.LeaseHeld, row.Updated, err)
	return err
}

// ListAwaitingReceipt implements services.PipelineStore.
func (r *PipelineRepository) ListAwaitingReceipt(ctx context.Context, signers []string) ([]services.TrackedTx, error) {
	rows, err := r.q.ListAwaitingReceipt(ctx, sqlcdb.ListAwaitingReceiptParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("list awaiting receipt: %w", err)
	}
	out := make([]services.TrackedTx, 0, len(rows))
	for _, row := range rows {
		t := services.TrackedTx{TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce), Attempts: make([]services.AttemptRef, len(row.AttemptHashes))}
		for i, h := range row.AttemptHashes {
			t.Attempts[i] = services.AttemptRef{Hash: common.HexToHash(h), Kind: services.AttemptKind(row.AttemptKinds[i])}
		}
		out = append(out, t)
	}
	return out, nil
}

// RecordReceipts implements services.PipelineStore.
func (r *PipelineRepository) RecordReceipts(ctx context.Context, lease domain.Lease, found []services.FoundReceipt) (int, error) {
	var p sqlcdb.RecordReceiptsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, f := range found {
		payload, err := json.Marshal(receiptPayload{
			TxHash: f.Receipt.TxHash.Hex(), Status: f.Receipt.Status, BlockNumber: f.Receipt.BlockNumber,
			BlockHash: f.Receipt.BlockHash.Hex(), GasUsed: f.Receipt.GasUsed, Kind: string(f.Kind),
		})
		if err != nil {
			return 0, err
		}
		p.TxIds = append(p.TxIds, f.TxID.String())
		p.TxHashes = append(p.TxHashes, f.Receipt.TxHash.Hex())
		p.Receipts = append(p.Receipts, string(payload))
		p.BlockNumbers = append(p.BlockNumbers, int64(f.Receipt.BlockNumber))
		p.BlockHashes = append(p.BlockHashes, f.Receipt.BlockHash.Hex())
	}
	row, err := r.q.RecordReceipts(ctx, p)
	return fencedOutcome(lease, "receipts", row.LeaseHeld, row.Updated, err)
}

// ListMined implements services.PipelineStore.
func (r *PipelineRepository) ListMined(ctx context.Context, signers []string) ([]services.MinedTx, error) {
	rows, err := r.q.ListMined(ctx, sqlcdb.ListMinedParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("list mined: %w", err)
	}
	out := make([]services.MinedTx, 0, len(rows))
	for _, row := range rows {
		out = append(out, services.MinedTx{
			TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce),
			BlockNumber: uint64(row.BlockNumber.Int64), BlockHash: common.HexToHash(row.BlockHash.String),
			Status: uint64(row.ReceiptStatus), Kind: services.AttemptKind(row.ReceiptKind),
		})
	}
	return out, nil
}

// RevertReorged implements services.PipelineStore.
func (r *PipelineRepository) RevertReorged(ctx context.Context, lease domain.Lease, txs []services.MinedTx) (int, error) {
	var p sqlcdb.RevertReorgedParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, t := range txs {
		p.TxIds = append(p.TxIds, t.TxID.String())
		p.BlockHashes = append(p.BlockHashes, t.BlockHash.Hex())
	}
	row, err := r.q.RevertReorged(ctx, p)
	return fencedOutcome(lease, "reorg revert", row.LeaseHeld, row.Updated, err)
}

// Finalize implements services.PipelineStore.
func (r *PipelineRepository) Finalize(ctx context.Context, lease domain.Lease, finals []services.Finalization) (int, error) {
	var p sqlcdb.FinalizeTxsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, f := range finals {
		p.TxIds = append(p.TxIds, f.Tx.TxID.String())
		p.BlockHashes = append(p.BlockHashes, f.Tx.BlockHash.Hex())
		p.States = append(p.States, string(f.State))
		p.SubStates = append(p.SubStates, f.SubState)
	}
	row, err := r.q.FinalizeTxs(ctx, p)
	return fencedOutcome(lease, "finality", row.LeaseHeld, row.Updated, err)
}

// ListResubmitDue implements services.PipelineStore.
func (r *PipelineRepository) ListResubmitDue(ctx context.Context, signer string, limit int) ([]services.DueResubmit, error) {
	rows, err := r.q.ListResubmitDue(ctx, sqlcdb.ListResubmitDueParams{ChainID: r.chainID, Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list resubmit due: %w", err)
	}
	out := make([]services.DueResubmit, 0, len(rows))
	for _, row := range rows {
		d := services.DueResubmit{TxID: row.TxID, Current: common.HexToHash(row.TxHash.String), Raw: row.RawTx, Kind: services.AttemptKind(row.Kind)}
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

// ClaimResubmits implements services.PipelineStore.
func (r *PipelineRepository) ClaimResubmits(ctx context.Context, lease domain.Lease, txIDs []uuid.UUID, resubmitAfter time.Duration) ([]uuid.UUID, error) {
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

// LowestOpenNonce implements services.PipelineStore.
func (r *PipelineRepository) LowestOpenNonce(ctx context.Context, signer string) (int64, error) {
	nonce, err := r.q.LowestOpenNonce(ctx, sqlcdb.LowestOpenNonceParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, fmt.Errorf("lowest open nonce: %w", err)
	}
	return nonce, nil
}

// InsertPlaceholders implements services.PipelineStore.
func (r *PipelineRepository) InsertPlaceholders(ctx context.Context, lease domain.Lease, txs []domain.ManagedTx) (int, error) {
	var p sqlcdb.InsertPlaceholdersParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, tx := range txs {
		payload, err := encodePayload(tx)
		if err != nil {
			return 0, err
		}
		p.TxIds = append(p.TxIds, tx.ID.String())
		p.Nonces = append(p.Nonces, int64(tx.Nonce))
		p.IntentHashes = append(p.IntentHashes, tx.Fingerprint[:])
		p.Payloads = append(p.Payloads, string(payload))
	}
	row, err := r.q.InsertPlaceholders(ctx, p)
	return fencedOutcome(lease, "placeholders", row.LeaseHeld, row.Inserted, err)
}

// RecordReplacements implements services.PipelineStore.
func (r *PipelineRepository) RecordReplacements(ctx context.Context, lease domain.Lease, replacements []services.Replacement) ([]uuid.UUID, error) {
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
		p.GasLimits = append(p.GasLimits, int64(a.GasLimit))
		p.RawTxs = append(p.RawTxs, a.Raw)
	}
	row, err := r.q.RecordReplacements(ctx, p)
	if _, err := fencedOutcome(lease, "replacement attempts", row.LeaseHeld, int64(len(row.UpdatedIds)), err); err != nil {
		return nil, err
	}
	return row.UpdatedIds, nil
}

// HeadOfLine implements services.PipelineStore.
func (r *PipelineRepository) HeadOfLine(ctx context.Context, signer string) (*services.HeadOfLineTx, error) {
	return r.resolvable(ctx, sqlcdb.GetResolvableParams{ChainID: r.chainID, Signer: pgtype.Text{String: signer, Valid: true}})
}

// Resolvable implements services.PipelineStore.
func (r *PipelineRepository) Resolvable(ctx context.Context, txID uuid.UUID) (*services.HeadOfLineTx, error) {
	return r.resolvable(ctx, sqlcdb.GetResolvableParams{ChainID: r.chainID, TxID: pgtype.UUID{Bytes: txID, Valid: true}})
}

func (r *PipelineRepository) resolvable(ctx context.Context, p sqlcdb.GetResolvableParams) (*services.HeadOfLineTx, error) {
	row, err := r.q.GetResolvable(ctx, p)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolvable tx: %w", err)
	}
	tx, err := toDomain(sqlcdb.ManagedTx{TxID: row.TxID, Signer: row.Signer, Nonce: row.Nonce, Payload: row.Payload, State: row.State})
	if err != nil {
		return nil, err
	}
	h := &services.HeadOfLineTx{
		TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce), State: domain.State(row.State),
		SubState: row.SubState.String, SubmitAttempts: int(row.SubmitAttempts), LastError: row.LastError.String,
		CreatedAt: row.CreatedAt, Intent: tx.Intent, GasLimit: tx.EffectiveGasLimit, PendingDepth: int(row.PendingDepth),
		Since: row.StuckSince,
	}
	if row.TxHash.Valid {
		hash := common.HexToHash(row.TxHash.String)
		h.TxHash = &hash
	}
	if row.AttemptGasLimit > 0 {
		h.GasLimit = uint64(row.AttemptGasLimit)
	}
	if row.MaxFeePerGas != "" {
		h.MaxFee, _ = new(big.Int).SetString(row.MaxFeePerGas, 10)
	}
	if row.MaxPriorityFeePerGas != "" {
		h.MaxTip, _ = new(big.Int).SetString(row.MaxPriorityFeePerGas, 10)
	}
	return h, nil
}

// ClaimStuckResolution implements services.PipelineStore.
func (r *PipelineRepository) ClaimStuckResolution(ctx context.Context, lease domain.Lease, claim services.StuckClaim) (bool, error) {
	p := sqlcdb.ClaimStuckResolutionParams{
		TxID: claim.TxID, NewState: string(claim.NewState), SubState: text(claim.SubState),
		Reason: claim.Reason, Action: string(claim.Action),
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.ClaimStuckResolution(ctx, p)
	n, err := fencedOutcome(lease, "stuck resolution claim", row.LeaseHeld, row.Updated, err)
	return n == 1, err
}

// RecordAttempt implements services.PipelineStore.
func (r *PipelineRepository) RecordAttempt(ctx context.Context, lease domain.Lease, a services.SignedAttempt, subState string, resubmitAfter time.Duration) error {
	p := sqlcdb.RecordAttemptParams{
		TxHash: a.Hash.Hex(), TxID: a.TxID, Nonce: int64(a.Nonce), Kind: string(a.Kind),
		MaxFee: a.MaxFee.String(), MaxTip: a.MaxTip.String(), GasLimit: int64(a.GasLimit), RawTx: a.Raw,
		SubState: text(subState), ResubmitAfterSeconds: resubmitAfter.Seconds(),
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.RecordAttempt(ctx, p)
	_, err = fencedOutcome(lease, "attempt", row.LeaseHeld, row.Updated, err)
	return err
}

// ListOpenSigners implements services.PipelineStore.
func (r *PipelineRepository) ListOpenSigners(ctx context.Context) ([]services.OpenSigner, error) {
	rows, err := r.q.ListOpenSigners(ctx, r.chainID)
	if err != nil {
		return nil, fmt.Errorf("list open signers: %w", err)
	}
	out := make([]services.OpenSigner, 0, len(rows))
	for _, row := range rows {
		out = append(out, services.OpenSigner{Signer: row.Signer, Owner: row.OwnerNode.String, LeaseLive: row.LeaseLive})
	}
	return out, nil
}

// OldestPendingAges implements services.PipelineStore.
func (r *PipelineRepository) OldestPendingAges(ctx context.Context, signers []string) (map[string]float64, error) {
	rows, err := r.q.OldestPendingAges(ctx, sqlcdb.OldestPendingAgesParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("oldest pending ages: %w", err)
	}
	out := make(map[string]float64, len(rows))
	for _, row := range rows {
		out[row.Signer] = row.AgeSeconds
	}
	return out, nil
}
