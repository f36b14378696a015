package repositories

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ApprovalRepository implements services.ApprovalStore on tx_approval and its votes
// (migration 0021).
type ApprovalRepository struct {
	q *sqlcdb.Queries
}

// NewApprovalRepository builds the repository on the pool.
func NewApprovalRepository(pool *pgxpool.Pool) *ApprovalRepository {
	return &ApprovalRepository{q: sqlcdb.New(pool)}
}

// Get implements services.ApprovalStore.
func (r *ApprovalRepository) Get(ctx context.Context, id uuid.UUID) (domain.Approval, error) {
	row, err := r.q.GetApproval(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Approval{}, &domain.NotFoundError{What: "no approval " + id.String()}
	}
	if err != nil {
		return domain.Approval{}, fmt.Errorf("approval %s: %w", id, err)
	}
	return r.withVotes(ctx, r.q, row)
}

// List implements services.ApprovalStore.
func (r *ApprovalRepository) List(ctx context.Context, f services.ApprovalFilter) ([]domain.Approval, error) {
	rows, err := r.q.ListApprovals(ctx, sqlcdb.ListApprovalsParams{FromStart: f.Before == uuid.Nil, BeforeID: f.Before, State: string(f.State),
		AllSigners: f.Signers == nil, Signers: f.Signers, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	out := make([]domain.Approval, 0, len(rows))
	ids := make([]uuid.UUID, 0, len(rows))
	for _, row := range rows {
		a, err := approvalOf(row)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
		ids = append(ids, a.ID)
	}
	votes, err := r.votes(ctx, r.q, ids)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Votes = votes[out[i].ID]
	}
	return out, nil
}

// Lock implements services.ApprovalStore.
func (r *ApprovalRepository) Lock(ctx context.Context, sess txmanager.Session, id uuid.UUID) (domain.Approval, bool, error) {
	q := sqlcdb.New(sess.DB())
	row, err := q.LockApproval(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Approval{}, false, &domain.NotFoundError{What: "no approval " + id.String()}
	}
	if err != nil {
		return domain.Approval{}, false, fmt.Errorf("lock approval %s: %w", id, err)
	}
	a, err := r.withVotes(ctx, q, row)
	return a, row.Expired, err
}

// AddVote implements services.ApprovalStore.
func (r *ApprovalRepository) AddVote(ctx context.Context, sess txmanager.Session, id uuid.UUID, v domain.ApprovalVote) (bool, error) {
	n, err := sqlcdb.New(sess.DB()).InsertApprovalVote(ctx, sqlcdb.InsertApprovalVoteParams{ApprovalID: id, Approver: v.Approver, Approve: v.Approve, Note: v.Note, NodeID: v.Node})
	if err != nil {
		return false, fmt.Errorf("vote on approval %s: %w", id, err)
	}
	return n == 1, nil
}

// Approve implements services.ApprovalStore.
func (r *ApprovalRepository) Approve(ctx context.Context, sess txmanager.Session, id uuid.UUID) error {
	if err := sqlcdb.New(sess.DB()).ApproveApproval(ctx, id); err != nil {
		return fmt.Errorf("approve %s: %w", id, err)
	}
	return nil
}

// Finish implements services.ApprovalStore.
func (r *ApprovalRepository) Finish(ctx context.Context, sess txmanager.Session, id uuid.UUID, state domain.ApprovalState, reason string, from ...domain.ApprovalState) (bool, error) {
	q := inSession(r.q, sess)
	states := make([]string, len(from))
	for i, s := range from {
		states[i] = string(s)
	}
	n, err := q.FinishApproval(ctx, sqlcdb.FinishApprovalParams{ApprovalID: id, State: string(state), FinalReason: reason, FromStates: states})
	if err != nil {
		return false, fmt.Errorf("finish approval %s as %s: %w", id, state, err)
	}
	return n == 1, nil
}

// Expire implements services.ApprovalStore.
func (r *ApprovalRepository) Expire(ctx context.Context, limit int) ([]services.ExpiredApproval, error) {
	rows, err := r.q.ExpireApprovals(ctx, int32(limit))
	if err != nil {
		return nil, fmt.Errorf("expire approvals: %w", err)
	}
	out := make([]services.ExpiredApproval, len(rows))
	for i, row := range rows {
		out[i] = services.ExpiredApproval{ID: row.ApprovalID, Signer: row.Signer, Reason: row.FinalReason}
	}
	return out, nil
}

// ApprovedToAdmit implements services.ApprovalStore.
func (r *ApprovalRepository) ApprovedToAdmit(ctx context.Context, chainID uint64, after services.ApprovalPosition, limit int) ([]domain.Approval, error) {
	rows, err := r.q.ApprovedToAdmit(ctx, sqlcdb.ApprovedToAdmitParams{ChainID: int64(chainID), AfterExpiresAt: after.ExpiresAt, AfterID: after.ID, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("approved intents of chain %d: %w", chainID, err)
	}
	out := make([]domain.Approval, 0, len(rows))
	for _, row := range rows {
		a, err := approvalOf(row)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Pending implements services.ApprovalStore.
func (r *ApprovalRepository) Pending(ctx context.Context) (int64, time.Duration, error) {
	row, err := r.q.PendingApprovals(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("pending approvals: %w", err)
	}
	return row.Pending, time.Duration(row.OldestSeconds * float64(time.Second)), nil
}

func (r *ApprovalRepository) withVotes(ctx context.Context, q *sqlcdb.Queries, row sqlcdb.TxApprovalRead) (domain.Approval, error) {
	a, err := approvalOf(row)
	if err != nil {
		return a, err
	}
	votes, err := r.votes(ctx, q, []uuid.UUID{a.ID})
	a.Votes = votes[a.ID]
	return a, err
}

func (r *ApprovalRepository) votes(ctx context.Context, q *sqlcdb.Queries, ids []uuid.UUID) (map[uuid.UUID][]domain.ApprovalVote, error) {
	out := map[uuid.UUID][]domain.ApprovalVote{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.ListApprovalVotes(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("approval votes: %w", err)
	}
	for _, row := range rows {
		out[row.ApprovalID] = append(out[row.ApprovalID], domain.ApprovalVote{Approver: row.Approver, Approve: row.Approve, Note: row.Note, Node: row.NodeID, At: row.At})
	}
	return out, nil
}

// RequestApproval implements services.AllocationStore.
func (r AllocationRepository) RequestApproval(ctx context.Context, sess txmanager.Session, a domain.Approval) (domain.Approval, error) {
	q := sqlcdb.New(sess.DB())
	p := sqlcdb.InsertApprovalParams{
		ApprovalID: a.ID, ChainID: int64(a.ChainID), Signer: a.Signer.Hex(), RequestID: text(a.RequestID), Fingerprint: a.Fingerprint[:],
		Requester: a.Requester, ValueWei: "0", Data: a.Intent.Data, GasLimit: int64(a.Intent.GasLimit), PolicyScope: a.PolicyScope,
		PolicyVersion: a.PolicyVersion, Reason: a.Reason, Role: a.Role, Required: int32(a.Required), CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt,
	}
	if a.Intent.To != nil {
		p.ToAddress = text(a.Intent.To.Hex())
	}
	if a.Intent.Value != nil {
		p.ValueWei = a.Intent.Value.String()
	}
	if p.Data == nil {
		p.Data = []byte{}
	}
	if v := a.Intent.MaxFeePerGas; v != nil {
		p.MaxFeePerGas = text(v.String())
	}
	if v := a.Intent.MaxPriorityFeePerGas; v != nil {
		p.MaxPriorityFeePerGas = text(v.String())
	}
	inserted, err := q.InsertApproval(ctx, p)
	if err != nil {
		return domain.Approval{}, fmt.Errorf("request approval: %w", err)
	}
	if len(inserted) == 1 {
		a.CreatedAt, a.ExpiresAt = inserted[0].CreatedAt, inserted[0].ExpiresAt
		return a, nil
	}
	row, err := q.GetApprovalByRequest(ctx, sqlcdb.GetApprovalByRequestParams{ChainID: int64(a.ChainID), Signer: a.Signer.Hex(), RequestID: text(a.RequestID)})
	if err != nil {
		return domain.Approval{}, fmt.Errorf("approval of request %s: %w", a.RequestID, err)
	}
	return approvalOf(row)
}

// LockApproved implements services.AllocationStore.
func (r AllocationRepository) LockApproved(ctx context.Context, sess txmanager.Session, ids []uuid.UUID) ([]services.ApprovedGrant, error) {
	rows, err := sqlcdb.New(sess.DB()).LockApprovedForAdmission(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("lock approved intents: %w", err)
	}
	open := make([]services.ApprovedGrant, len(rows))
	for i, row := range rows {
		open[i] = services.ApprovedGrant{ID: row.ApprovalID, PolicyScope: row.PolicyScope, PolicyVersion: row.PolicyVersion, Role: row.Role, Required: int(row.Required)}
	}
	return open, nil
}

// AdmitApprovals implements services.AllocationStore.
func (r AllocationRepository) AdmitApprovals(ctx context.Context, sess txmanager.Session, admitted []services.AdmittedApproval) error {
	params := sqlcdb.AdmitApprovalsParams{ApprovalIds: make([]uuid.UUID, len(admitted)), TxIds: make([]uuid.UUID, len(admitted))}
	for i, a := range admitted {
		params.ApprovalIds[i], params.TxIds[i] = a.ApprovalID, a.TxID
	}
	if err := sqlcdb.New(sess.DB()).AdmitApprovals(ctx, params); err != nil {
		return fmt.Errorf("admit approvals: %w", err)
	}
	return nil
}

// LockPolicies implements services.AllocationStore.
func (r AllocationRepository) LockPolicies(ctx context.Context, sess txmanager.Session, signers, credentials []string) error {
	if credentials == nil {
		credentials = []string{}
	}
	if err := sqlcdb.New(sess.DB()).LockPoliciesOfBatch(ctx, sqlcdb.LockPoliciesOfBatchParams{Signers: signers, Credentials: credentials}); err != nil {
		return fmt.Errorf("lock the batch's policies: %w", err)
	}
	return nil
}

func approvalOf(row sqlcdb.TxApprovalRead) (domain.Approval, error) {
	a := domain.Approval{
		ID: row.ApprovalID, ChainID: uint64(row.ChainID), RequestID: row.RequestID, Requester: row.Requester,
		PolicyScope: row.PolicyScope, PolicyVersion: row.PolicyVersion, Reason: row.Reason, Role: row.Role, Required: int(row.Required),
		State: domain.ApprovalState(row.State), FinalReason: row.FinalReason, CreatedAt: row.CreatedAt, ExpiresAt: row.ExpiresAt, DecidedAt: row.DecidedAt,
		AdmittedTxID: row.AdmittedTxID,
	}
	if !common.IsHexAddress(row.Signer) {
		return a, fmt.Errorf("approval %s: stored signer %q is not an address", row.ApprovalID, row.Signer)
	}
	a.Signer = common.HexToAddress(row.Signer)
	copy(a.Fingerprint[:], row.Fingerprint)
	a.Intent.GasLimit = uint64(row.GasLimit)
	if row.ToAddress != "" {
		to := common.HexToAddress(row.ToAddress)
		a.Intent.To = &to
	}
	if len(row.Data) > 0 {
		a.Intent.Data = row.Data
	}
	var err error
	if a.Intent.Value, err = decodeWei(row.ValueWei); err != nil {
		return a, fmt.Errorf("approval %s value: %w", row.ApprovalID, err)
	}
	for _, f := range []struct {
		text string
		dst  **big.Int
	}{{row.MaxFeePerGas, &a.Intent.MaxFeePerGas}, {row.MaxPriorityFeePerGas, &a.Intent.MaxPriorityFeePerGas}} {
		if f.text == "" {
			continue
		}
		if *f.dst, err = decodeWei(f.text); err != nil {
			return a, fmt.Errorf("approval %s fee: %w", row.ApprovalID, err)
		}
	}
	return a, nil
}
