package txmclient

import (
	"context"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// ApprovalsQuery filters ListApprovals: a state (AWAITING_APPROVAL lists what waits for a
// decision), a signer, and a page (Before: the previous page's next).
type ApprovalsQuery struct {
	State  string
	Signer string
	Before string
	Limit  uint32
}

// ListApprovals lists the intents spending policies sent for approval, newest first, for
// the caller's signers, and the cursor of the next page ("" after the last).
func (c *Client) ListApprovals(ctx context.Context, q ApprovalsQuery) ([]*v1.Approval, string, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListApprovalsResponse, error) {
		return n.tx.ListApprovals(ctx, &v1.ListApprovalsRequest{State: q.State, Signer: q.Signer, Before: q.Before, Limit: q.Limit})
	})
	return resp.GetApprovals(), resp.GetNext(), err
}

// Approval reads one approval with its votes; its id is the transaction's id the create
// answered.
func (c *Client) Approval(ctx context.Context, id string) (*v1.Approval, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Approval, error) {
		return n.tx.GetApproval(ctx, &v1.GetApprovalRequest{ApprovalId: id})
	})
}

// Approve records this client's credential's approval (it needs the approval's role, a
// grant of its signer, and not to be the requester). A vote is cast once: a retry after a
// lost answer is answered ALREADY_DECIDED, so only calls refused before they reached the
// service are retried.
func (c *Client) Approve(ctx context.Context, id, note string) (*v1.Approval, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Approval, error) {
		return n.tx.ApproveTx(ctx, &v1.DecideApprovalRequest{ApprovalId: id, Note: note})
	})
}

// Reject ends the approval at once: REJECTED, final, in the feed with the note as reason.
func (c *Client) Reject(ctx context.Context, id, note string) (*v1.Approval, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Approval, error) {
		return n.tx.RejectTx(ctx, &v1.DecideApprovalRequest{ApprovalId: id, Note: note})
	})
}
