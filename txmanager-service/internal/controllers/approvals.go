package controllers

import (
	"context"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// errNoApprovals answers approval calls on a stack assembled without them (tests of other
// parts); the service always has them.
var errNoApprovals = v1.ErrorNotFound("approvals are not served by this stack")

// ListApprovals implements v1.TxServiceServer: the approvals of the caller's signers.
func (c *TxController) ListApprovals(ctx context.Context, req *v1.ListApprovalsRequest) (*v1.ListApprovalsResponse, error) {
	if c.approvals == nil {
		return nil, errNoApprovals
	}
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	signers := p.SignerFilter()
	if s := req.GetSigner(); s != "" {
		addr, err := domain.ParseAddress("signer", s)
		if err != nil {
			return nil, ToAPIError(c.log, err)
		}
		if err := requireGrant(ctx, addr, s); err != nil {
			return nil, err
		}
		signers = []string{addr.Hex()}
	}
	if signers == nil && !p.AllSigners {
		signers = []string{}
	}
	list, err := c.approvals.List(ctx, req.GetState(), req.GetBefore(), signers, int(req.GetLimit()))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListApprovalsResponse{Approvals: make([]*v1.Approval, len(list))}
	for i, a := range list {
		out.Approvals[i] = toAPIApproval(a)
	}
	limit := int(req.GetLimit())
	if limit <= 0 || limit > 500 {
		limit = 500
	}
	if len(list) == limit {
		out.Next = list[len(list)-1].ID.String()
	}
	return out, nil
}

// GetApproval implements v1.TxServiceServer.
func (c *TxController) GetApproval(ctx context.Context, req *v1.GetApprovalRequest) (*v1.Approval, error) {
	if c.approvals == nil {
		return nil, errNoApprovals
	}
	a, err := c.approvals.Get(ctx, req.GetApprovalId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	if err := requireGrant(ctx, a.Signer, a.Signer.Hex()); err != nil {
		return nil, err
	}
	return toAPIApproval(a), nil
}

// ApproveTx implements v1.TxServiceServer.
func (c *TxController) ApproveTx(ctx context.Context, req *v1.DecideApprovalRequest) (*v1.Approval, error) {
	return c.decide(ctx, req, true)
}

// RejectTx implements v1.TxServiceServer.
func (c *TxController) RejectTx(ctx context.Context, req *v1.DecideApprovalRequest) (*v1.Approval, error) {
	return c.decide(ctx, req, false)
}

func (c *TxController) decide(ctx context.Context, req *v1.DecideApprovalRequest, approve bool) (*v1.Approval, error) {
	if c.approvals == nil {
		return nil, errNoApprovals
	}
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	a, err := c.approvals.Decide(ctx, req.GetApprovalId(), p, approve, req.GetNote())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIApproval(a), nil
}

func toAPIApproval(a domain.Approval) *v1.Approval {
	out := &v1.Approval{
		ApprovalId: a.ID.String(), ChainId: a.ChainID, Signer: a.Signer.Hex(), RequestId: a.RequestID, Requester: a.Requester,
		To: a.Intent.ToText(), GasLimit: a.Intent.GasLimit, PolicyScope: a.PolicyScope, PolicyVersion: a.PolicyVersion, Reason: a.Reason,
		Role: a.Role, Required: uint32(a.Required), Approvals: uint32(a.Approvals()), State: string(a.State), FinalReason: a.FinalReason,
		CreatedAt: timestamppb.New(a.CreatedAt), ExpiresAt: timestamppb.New(a.ExpiresAt),
	}
	if a.Intent.Value != nil {
		out.Value = a.Intent.Value.String()
	}
	if len(a.Intent.Data) > 0 {
		out.Data = hexutil.Encode(a.Intent.Data)
	}
	if v := a.Intent.MaxFeePerGas; v != nil {
		out.MaxFeePerGas = v.String()
	}
	if v := a.Intent.MaxPriorityFeePerGas; v != nil {
		out.MaxPriorityFeePerGas = v.String()
	}
	if a.DecidedAt != nil {
		out.DecidedAt = timestamppb.New(*a.DecidedAt)
	}
	for _, v := range a.Votes {
		out.Votes = append(out.Votes, &v1.ApprovalVote{Approver: v.Approver, Approve: v.Approve, Note: v.Note, NodeId: v.Node, At: timestamppb.New(v.At)})
	}
	return out
}
