package writer

import (
	"context"
	"encoding/json"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// approvalNeed is a policy sending a create for approval, and why.
type approvalNeed struct {
	policy domain.VersionedPolicy
	reason string
}

// requestedApproval is a create of the batch answered with an approval instead of a nonce.
type requestedApproval struct {
	op       int
	approval domain.Approval
}

// newApproval is op's approval request under need's policy.
func (a *Allocator) newApproval(b *signerBatch, op *Op, need *approvalNeed, now time.Time) domain.Approval {
	rule := need.policy.Policy.Approval
	return domain.Approval{
		ID:            uuid.Must(uuid.NewV7()),
		ChainID:       a.chainID,
		Signer:        b.signer,
		RequestID:     op.Request.RequestID,
		Fingerprint:   op.Fingerprint,
		Requester:     op.Request.Admission.Credential,
		Intent:        op.Request.Intent,
		PolicyScope:   need.policy.Scope.String(),
		PolicyVersion: need.policy.Version,
		Reason:        need.reason,
		Role:          rule.Role,
		Required:      rule.Approvers,
		State:         domain.ApprovalAwaiting,
		CreatedAt:     now,
		ExpiresAt:     now.Add(rule.ExpiresAfter.Duration),
	}
}

// requestApprovals records the batch's approval requests. A request id already waiting (or
// decided) under an approval is answered with that approval, as a replay or a conflict.
func (a *Allocator) requestApprovals(ctx context.Context, sess txmanager.Session, b *signerBatch) error {
	for _, r := range b.approvals {
		stored, err := a.store.RequestApproval(ctx, sess, r.approval)
		if err != nil {
			return err
		}
		if stored.ID == r.approval.ID {
			if err := a.store.AppendEvent(ctx, sess, approvalRequested(stored)); err != nil {
				return err
			}
			continue
		}
		tx := stored.AsTx()
		for i := range b.outcome {
			if b.outcome[i].tx.ID == r.approval.ID {
				b.outcome[i] = opOutcome{tx: tx, err: domain.ReplayOf(tx, b.ops[i].Fingerprint, b.ops[i].Request.RequestID)}
			}
		}
	}
	return nil
}

// approvalIDs are the approvals the batch's creates admit.
func (b *signerBatch) approvalIDs() []uuid.UUID {
	var ids []uuid.UUID
	for _, op := range b.ops {
		if id := op.Request.Admission.ApprovalID; id != uuid.Nil {
			ids = append(ids, id)
		}
	}
	return ids
}

// admittedApprovals are the approvals whose transactions the batch allocated or adopted.
func (b *signerBatch) admittedApprovals() []services.AdmittedApproval {
	var admitted []services.AdmittedApproval
	for i, op := range b.ops {
		id, out := op.Request.Admission.ApprovalID, b.outcome[i]
		if id != uuid.Nil && ((out.created && out.tx.ID == id) || out.adopted) {
			admitted = append(admitted, services.AdmittedApproval{ApprovalID: id, TxID: out.tx.ID})
		}
	}
	return admitted
}

// approvalRequested is the event telling approvers (through webhooks) that an intent waits.
func approvalRequested(a domain.Approval) services.ServiceEvent {
	payload := map[string]any{"approvalId": a.ID.String(), "signer": a.Signer.Hex(), "requestId": a.RequestID, "requester": a.Requester,
		"to": a.Intent.ToText(), "value": a.Intent.Value.String(), "role": a.Role, "required": a.Required, "reason": a.Reason,
		"expiresAt": a.ExpiresAt.UTC().Format(time.RFC3339)}
	raw, _ := json.Marshal(payload)
	return services.ServiceEvent{ID: domain.EventApprovalRequested + ":" + a.ID.String(), Kind: domain.EventApprovalRequested, ChainID: a.ChainID, Signer: a.Signer, Payload: raw}
}
