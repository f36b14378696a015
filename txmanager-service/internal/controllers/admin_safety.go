package controllers

import (
	"context"
	"encoding/hex"
	"encoding/json"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// PauseSigner implements v1.AdminServiceServer. The roster is the cluster's: any node answers.
func (c *AdminController) PauseSigner(ctx context.Context, req *v1.PauseSignerRequest) (*v1.RosterSigner, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	entry, err := c.roster.Pause(ctx, req.GetSigner(), req.GetNote(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIRosterSigner(entry), nil
}

// ResumeSigner implements v1.AdminServiceServer.
func (c *AdminController) ResumeSigner(ctx context.Context, req *v1.PauseSignerRequest) (*v1.RosterSigner, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	entry, err := c.roster.Resume(ctx, req.GetSigner(), req.GetNote(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIRosterSigner(entry), nil
}

// SetPolicy implements v1.AdminServiceServer.
func (c *AdminController) SetPolicy(ctx context.Context, req *v1.SetPolicyRequest) (*v1.Policy, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	if req.GetPolicy() == nil {
		return nil, v1.ErrorInvalidArgument("policy: required")
	}
	raw, err := req.GetPolicy().MarshalJSON()
	if err != nil {
		return nil, v1.ErrorInvalidArgument("policy: %s", err.Error())
	}
	p, err := c.policies.Set(ctx, req.GetScopeKind(), req.GetScope(), raw, callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIPolicy(p)
}

// GetPolicy implements v1.AdminServiceServer.
func (c *AdminController) GetPolicy(ctx context.Context, req *v1.PolicyScopeRequest) (*v1.Policy, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	p, err := c.policies.Get(ctx, req.GetScopeKind(), req.GetScope())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIPolicy(p)
}

// DeletePolicy implements v1.AdminServiceServer.
func (c *AdminController) DeletePolicy(ctx context.Context, req *v1.PolicyScopeRequest) (*v1.DeletePolicyResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	version, err := c.policies.Delete(ctx, req.GetScopeKind(), req.GetScope(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return &v1.DeletePolicyResponse{Version: version}, nil
}

// ListPolicies implements v1.AdminServiceServer.
func (c *AdminController) ListPolicies(ctx context.Context, _ *v1.ListPoliciesRequest) (*v1.ListPoliciesResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	policies, err := c.policies.List(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListPoliciesResponse{Policies: make([]*v1.Policy, 0, len(policies))}
	for _, p := range policies {
		api, err := toAPIPolicy(p)
		if err != nil {
			return nil, err
		}
		out.Policies = append(out.Policies, api)
	}
	return out, nil
}

// ListPolicyVersions implements v1.AdminServiceServer.
func (c *AdminController) ListPolicyVersions(ctx context.Context, req *v1.PolicyScopeRequest) (*v1.ListPolicyVersionsResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	versions, err := c.policies.Versions(ctx, req.GetScopeKind(), req.GetScope())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListPolicyVersionsResponse{Versions: make([]*v1.PolicyVersion, 0, len(versions))}
	for _, v := range versions {
		api := &v1.PolicyVersion{Version: v.Version, Deleted: v.Rules == "", ChangedAt: timestamppb.New(v.ChangedAt), ChangedBy: v.ChangedBy}
		if v.Rules != "" {
			if api.Policy, err = policyStruct([]byte(v.Rules)); err != nil {
				return nil, ToAPIError(c.log, err)
			}
		}
		out.Versions = append(out.Versions, api)
	}
	return out, nil
}

// ListAudit implements v1.AdminServiceServer.
func (c *AdminController) ListAudit(ctx context.Context, req *v1.ListAuditRequest) (*v1.ListAuditResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	f := services.AuditFilter{AfterSeq: req.GetAfterSeq(), Subject: req.GetSubject(), Action: req.GetAction(), Actor: req.GetActor(), Limit: int(req.GetLimit())}
	if req.GetSince() != nil {
		f.Since = req.GetSince().AsTime()
	}
	records, err := c.audit.List(ctx, f)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListAuditResponse{Records: make([]*v1.AuditRecord, 0, len(records))}
	for _, r := range records {
		out.Records = append(out.Records, &v1.AuditRecord{Seq: r.Seq, At: timestamppb.New(r.At), NodeId: r.Node, Actor: r.Actor, Action: r.Action,
			Subject: r.Subject, Before: r.Before, After: r.After, PrevHash: hex.EncodeToString(r.PrevHash), Hash: hex.EncodeToString(r.Hash)})
	}
	limit := f.Limit
	if limit <= 0 || limit > 1000 {
		limit = 1000
	}
	if len(records) == limit {
		out.NextAfterSeq = records[len(records)-1].Seq
	}
	return out, nil
}

// VerifyAudit implements v1.AdminServiceServer.
func (c *AdminController) VerifyAudit(ctx context.Context, _ *v1.VerifyAuditRequest) (*v1.VerifyAuditResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	v, err := c.audit.Verify(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.VerifyAuditResponse{Ok: v.FirstBad == nil, Checked: v.Checked, LastSeq: v.Head.LastSeq, LastHash: hex.EncodeToString(v.Head.LastHash),
		PrunedThroughSeq: v.Head.PrunedThroughSeq}
	if v.FirstBad != nil {
		out.FirstBadSeq, out.Reason = v.FirstBad.Seq, v.FirstBad.Reason
	}
	return out, nil
}

func toAPIPolicy(p domain.VersionedPolicy) (*v1.Policy, error) {
	doc, err := policyStruct(p.Policy.JSON())
	if err != nil {
		return nil, err
	}
	return &v1.Policy{ScopeKind: string(p.Scope.Kind), Scope: p.Scope.ID, Version: p.Version, Policy: doc,
		UpdatedAt: timestamppb.New(p.UpdatedAt), UpdatedBy: p.UpdatedBy}, nil
}

func policyStruct(raw []byte) (*structpb.Struct, error) {
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	return structpb.NewStruct(m)
}
