package txmclient

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/structpb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// The operators' calls need a credential with the admin grant. Reads are retried like any
// read; an action (resolve, release) only after an answer saying it was not carried out.
// chainID 0 means the deployment's only chain.

// SignerStatus reports on one signer: its lease, next nonce, pending transactions, stuck
// count and whether it is quarantined.
func (c *Client) SignerStatus(ctx context.Context, chainID uint64, signer string) (*v1.SignerStatus, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.SignerStatus, error) {
		return n.admin.GetSignerStatus(ctx, &v1.GetSignerStatusRequest{ChainId: chainID, Signer: signer})
	})
}

// Signers reports on every signer the answering node holds a key for, on every chain it
// serves (chainID 0) or on one.
func (c *Client) Signers(ctx context.Context, chainID uint64) ([]*v1.SignerStatus, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListSignersResponse, error) {
		return n.admin.ListSigners(ctx, &v1.ListSignersRequest{ChainId: chainID})
	})
	return resp.GetSigners(), err
}

// Quarantine reports a signer's quarantine, with what the chain holds at each nonce the
// database does not know (from req.FromNonce, req.Limit of them; NextFromNonce pages on).
func (c *Client) Quarantine(ctx context.Context, req *v1.GetQuarantineRequest) (*v1.Quarantine, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Quarantine, error) {
		return n.admin.GetQuarantine(ctx, req)
	})
}

// ReleaseSigner ends a signer's quarantine once an operator has looked at its unknown
// nonces; note is recorded.
func (c *Client) ReleaseSigner(ctx context.Context, chainID uint64, signer, note string) (*v1.Quarantine, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Quarantine, error) {
		return n.admin.ReleaseSigner(ctx, &v1.ReleaseSignerRequest{ChainId: chainID, Signer: signer, Note: note})
	})
}

// ListStuck lists STUCK transactions, oldest first (of one signer when req.Signer is set).
func (c *Client) ListStuck(ctx context.Context, req *v1.ListStuckRequest) ([]*v1.Tx, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListStuckResponse, error) {
		return n.admin.ListStuck(ctx, req)
	})
	return resp.GetTxs(), err
}

// ResolveTx resolves one unmined transaction now: action NOOP, CANCEL, REPLACE or
// PLACEHOLDER ("" lets the service's stuck hook decide); reason is recorded.
func (c *Client) ResolveTx(ctx context.Context, txID, action, reason string) (*v1.ResolveTxResponse, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ResolveTxResponse, error) {
		return n.admin.ResolveTx(ctx, &v1.ResolveTxRequest{TxId: txID, Action: action, Reason: reason})
	})
}

// Nodes lists the service's instances (the node registry).
func (c *Client) Nodes(ctx context.Context) ([]*v1.Node, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListNodesResponse, error) {
		return n.admin.ListNodes(ctx, &v1.ListNodesRequest{})
	})
	return resp.GetNodes(), err
}

// AddSigner puts a signer into service on every node of the cluster without a restart
// (req.Source: keystore, awsKms, gcpKms or external; req.KeyRef: the KMS key id). The
// answering node reads the key first; the others serve it within one roster poll. Adding
// it again with the same key source answers it as it is, so a lost answer is retried.
func (c *Client) AddSigner(ctx context.Context, req *v1.AddSignerRequest) (*v1.RosterSigner, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.RosterSigner, error) {
		return n.admin.AddSigner(ctx, req)
	})
}

// RetireSigner retires a signer: no create is accepted for it from the moment the answer
// is given, its unfinished transactions go on to a final state, then it lets its leases
// go. Retiring it again answers it as it is (with its unfinished count), so a lost answer
// is retried.
func (c *Client) RetireSigner(ctx context.Context, signer, note string) (*v1.RosterSigner, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.RosterSigner, error) {
		return n.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: signer, Note: note})
	})
}

// Roster lists the signer roster: every signer added at run time or configured in a
// node's file, with its state (active, retiring, retired).
func (c *Client) Roster(ctx context.Context) ([]*v1.RosterSigner, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListRosterResponse, error) {
		return n.admin.ListRoster(ctx, &v1.ListRosterRequest{})
	})
	return resp.GetSigners(), err
}

// PauseSigner stops new creates for a signer on every node (SIGNER_PAUSED) while its
// transactions in flight go on; note is recorded in the audit trail.
func (c *Client) PauseSigner(ctx context.Context, signer, note string) (*v1.RosterSigner, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.RosterSigner, error) {
		return n.admin.PauseSigner(ctx, &v1.PauseSignerRequest{Signer: signer, Note: note})
	})
}

// ResumeSigner lets a paused signer take creates again.
func (c *Client) ResumeSigner(ctx context.Context, signer, note string) (*v1.RosterSigner, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.RosterSigner, error) {
		return n.admin.ResumeSigner(ctx, &v1.PauseSignerRequest{Signer: signer, Note: note})
	})
}

// SetPolicy makes policy (a JSON document: destinations, maxValuePerTx, maxFeePerGas,
// windows, minRemainingBalance) the spending policy of a signer or a credential (scopeKind
// "signer" or "credential"), as its next version.
func (c *Client) SetPolicy(ctx context.Context, scopeKind, scope string, policy []byte) (*v1.Policy, error) {
	doc := &structpb.Struct{}
	if err := doc.UnmarshalJSON(policy); err != nil {
		return nil, fmt.Errorf("the policy is not a JSON object: %w", err)
	}
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Policy, error) {
		return n.admin.SetPolicy(ctx, &v1.SetPolicyRequest{ScopeKind: scopeKind, Scope: scope, Policy: doc})
	})
}

// Policy answers a scope's policy (NOT_FOUND when it has none).
func (c *Client) Policy(ctx context.Context, scopeKind, scope string) (*v1.Policy, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Policy, error) {
		return n.admin.GetPolicy(ctx, &v1.PolicyScopeRequest{ScopeKind: scopeKind, Scope: scope})
	})
}

// DeletePolicy removes a scope's policy and answers the version recording the deletion.
func (c *Client) DeletePolicy(ctx context.Context, scopeKind, scope string) (int64, error) {
	resp, err := retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.DeletePolicyResponse, error) {
		return n.admin.DeletePolicy(ctx, &v1.PolicyScopeRequest{ScopeKind: scopeKind, Scope: scope})
	})
	return resp.GetVersion(), err
}

// Policies lists every policy in force.
func (c *Client) Policies(ctx context.Context) ([]*v1.Policy, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListPoliciesResponse, error) {
		return n.admin.ListPolicies(ctx, &v1.ListPoliciesRequest{})
	})
	return resp.GetPolicies(), err
}

// PolicyVersions lists a scope's versions, newest first.
func (c *Client) PolicyVersions(ctx context.Context, scopeKind, scope string) ([]*v1.PolicyVersion, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListPolicyVersionsResponse, error) {
		return n.admin.ListPolicyVersions(ctx, &v1.PolicyScopeRequest{ScopeKind: scopeKind, Scope: scope})
	})
	return resp.GetVersions(), err
}

// Audit reads one page of the audit trail (req.AfterSeq pages on: NextAfterSeq).
func (c *Client) Audit(ctx context.Context, req *v1.ListAuditRequest) (*v1.ListAuditResponse, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListAuditResponse, error) {
		return n.admin.ListAudit(ctx, req)
	})
}

// VerifyAudit has the service recompute the audit trail's hash chain.
func (c *Client) VerifyAudit(ctx context.Context) (*v1.VerifyAuditResponse, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.VerifyAuditResponse, error) {
		return n.admin.VerifyAudit(ctx, &v1.VerifyAuditRequest{})
	})
}
