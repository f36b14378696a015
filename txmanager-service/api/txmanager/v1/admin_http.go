// HTTP bindings for AdminService over Kratos transport/http (hand-written; see
// txmanager_http.go for why).

package v1

import (
	"context"
	"strconv"
	"time"

	"github.com/go-kratos/kratos/v2/transport/http"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// AdminServiceHTTPServer is what the admin routes call.
type AdminServiceHTTPServer interface {
	ResolveTx(context.Context, *ResolveTxRequest) (*ResolveTxResponse, error)
	GetSignerStatus(context.Context, *GetSignerStatusRequest) (*SignerStatus, error)
	ListSigners(context.Context, *ListSignersRequest) (*ListSignersResponse, error)
	ListStuck(context.Context, *ListStuckRequest) (*ListStuckResponse, error)
	ListNodes(context.Context, *ListNodesRequest) (*ListNodesResponse, error)
	GetQuarantine(context.Context, *GetQuarantineRequest) (*Quarantine, error)
	ReleaseSigner(context.Context, *ReleaseSignerRequest) (*Quarantine, error)
	AddSigner(context.Context, *AddSignerRequest) (*RosterSigner, error)
	RetireSigner(context.Context, *RetireSignerRequest) (*RosterSigner, error)
	ListRoster(context.Context, *ListRosterRequest) (*ListRosterResponse, error)
	PauseSigner(context.Context, *PauseSignerRequest) (*RosterSigner, error)
	ResumeSigner(context.Context, *PauseSignerRequest) (*RosterSigner, error)
	SetPolicy(context.Context, *SetPolicyRequest) (*Policy, error)
	GetPolicy(context.Context, *PolicyScopeRequest) (*Policy, error)
	DeletePolicy(context.Context, *PolicyScopeRequest) (*DeletePolicyResponse, error)
	ListPolicies(context.Context, *ListPoliciesRequest) (*ListPoliciesResponse, error)
	ListPolicyVersions(context.Context, *PolicyScopeRequest) (*ListPolicyVersionsResponse, error)
	ListAudit(context.Context, *ListAuditRequest) (*ListAuditResponse, error)
	VerifyAudit(context.Context, *VerifyAuditRequest) (*VerifyAuditResponse, error)
	CreateWebhook(context.Context, *CreateWebhookRequest) (*CreateWebhookResponse, error)
	ListWebhooks(context.Context, *ListWebhooksRequest) (*ListWebhooksResponse, error)
	GetWebhook(context.Context, *WebhookRequest) (*Webhook, error)
	PauseWebhook(context.Context, *WebhookRequest) (*Webhook, error)
	ResumeWebhook(context.Context, *WebhookRequest) (*Webhook, error)
	ReplayWebhook(context.Context, *ReplayWebhookRequest) (*Webhook, error)
	DeleteWebhook(context.Context, *WebhookRequest) (*DeleteWebhookResponse, error)
	SetFunding(context.Context, *SetFundingRequest) (*SignerFunding, error)
	GetFunding(context.Context, *FundingRequest) (*SignerFunding, error)
	DeleteFunding(context.Context, *FundingRequest) (*DeleteFundingResponse, error)
}

// RegisterAdminServiceHTTPServer adds the admin routes to s.
func RegisterAdminServiceHTTPServer(s *http.Server, srv AdminServiceHTTPServer, opts HTTPOptions) {
	r := s.Route("/")
	r.POST("/api/v1/admin/tx/{tx_id}/resolve", func(ctx http.Context) error {
		var in ResolveTxRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.TxId = ctx.Vars().Get("tx_id")
		return serve(ctx, AdminService_ResolveTx_FullMethodName, &in, srv.ResolveTx)
	})
	r.GET("/api/v1/admin/signers/{signer}", func(ctx http.Context) error {
		chainID, err := queryChainID(ctx.Request().URL.Query())
		if err != nil {
			return err
		}
		in := GetSignerStatusRequest{Signer: ctx.Vars().Get("signer"), ChainId: chainID}
		return serve(ctx, AdminService_GetSignerStatus_FullMethodName, &in, srv.GetSignerStatus)
	})
	r.GET("/api/v1/admin/signers", func(ctx http.Context) error {
		chainID, err := queryChainID(ctx.Request().URL.Query())
		if err != nil {
			return err
		}
		return serve(ctx, AdminService_ListSigners_FullMethodName, &ListSignersRequest{ChainId: chainID}, srv.ListSigners)
	})
	r.GET("/api/v1/admin/stuck", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		in := ListStuckRequest{Signer: q.Get("signer"), Limit: limit, ChainId: chainID}
		return serve(ctx, AdminService_ListStuck_FullMethodName, &in, srv.ListStuck)
	})
	r.GET("/api/v1/admin/nodes", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListNodes_FullMethodName, &ListNodesRequest{}, srv.ListNodes)
	})
	r.GET("/api/v1/admin/signers/{signer}/quarantine", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		in := GetQuarantineRequest{Signer: ctx.Vars().Get("signer"), Limit: limit, ChainId: chainID}
		// fromNonce is the proto JSON name (the OpenAPI document's); from_nonce is older.
		raw, name := q.Get("fromNonce"), "fromNonce"
		if raw == "" {
			raw, name = q.Get("from_nonce"), "from_nonce"
		}
		if raw != "" {
			if in.FromNonce, err = strconv.ParseUint(raw, 10, 64); err != nil {
				return InvalidArgument(name, "must be a non-negative integer")
			}
		}
		if raw := q.Get("nonces"); raw != "" {
			if in.ListNonces, err = strconv.ParseBool(raw); err != nil {
				return InvalidArgument("nonces", "must be true or false")
			}
		}
		return serve(ctx, AdminService_GetQuarantine_FullMethodName, &in, srv.GetQuarantine)
	})
	r.POST("/api/v1/admin/signers/{signer}/release", func(ctx http.Context) error {
		var in ReleaseSignerRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.Signer = ctx.Vars().Get("signer")
		if chainID, err := queryChainID(ctx.Request().URL.Query()); err != nil {
			return err
		} else if chainID != 0 {
			in.ChainId = chainID
		}
		return serve(ctx, AdminService_ReleaseSigner_FullMethodName, &in, srv.ReleaseSigner)
	})
	r.POST("/api/v1/admin/roster", func(ctx http.Context) error {
		var in AddSignerRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		return serve(ctx, AdminService_AddSigner_FullMethodName, &in, srv.AddSigner)
	})
	r.POST("/api/v1/admin/roster/{signer}/retire", func(ctx http.Context) error {
		var in RetireSignerRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.Signer = ctx.Vars().Get("signer")
		return serve(ctx, AdminService_RetireSigner_FullMethodName, &in, srv.RetireSigner)
	})
	r.GET("/api/v1/admin/roster", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListRoster_FullMethodName, &ListRosterRequest{}, srv.ListRoster)
	})
	pause := func(method string, call func(context.Context, *PauseSignerRequest) (*RosterSigner, error)) func(http.Context) error {
		return func(ctx http.Context) error {
			var in PauseSignerRequest
			if ctx.Request().ContentLength != 0 {
				if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
					return err
				}
			}
			in.Signer = ctx.Vars().Get("signer")
			return serve(ctx, method, &in, call)
		}
	}
	r.POST("/api/v1/admin/roster/{signer}/pause", pause(AdminService_PauseSigner_FullMethodName, srv.PauseSigner))
	r.POST("/api/v1/admin/roster/{signer}/resume", pause(AdminService_ResumeSigner_FullMethodName, srv.ResumeSigner))
	scopeOf := func(ctx http.Context) *PolicyScopeRequest {
		return &PolicyScopeRequest{ScopeKind: ctx.Vars().Get("scope_kind"), Scope: ctx.Vars().Get("scope")}
	}
	r.PUT("/api/v1/admin/policies/{scope_kind}/{scope}", func(ctx http.Context) error {
		var in SetPolicyRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		in.ScopeKind, in.Scope = ctx.Vars().Get("scope_kind"), ctx.Vars().Get("scope")
		return serve(ctx, AdminService_SetPolicy_FullMethodName, &in, srv.SetPolicy)
	})
	r.GET("/api/v1/admin/policies/{scope_kind}/{scope}", func(ctx http.Context) error {
		return serve(ctx, AdminService_GetPolicy_FullMethodName, scopeOf(ctx), srv.GetPolicy)
	})
	r.DELETE("/api/v1/admin/policies/{scope_kind}/{scope}", func(ctx http.Context) error {
		return serve(ctx, AdminService_DeletePolicy_FullMethodName, scopeOf(ctx), srv.DeletePolicy)
	})
	r.GET("/api/v1/admin/policies/{scope_kind}/{scope}/versions", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListPolicyVersions_FullMethodName, scopeOf(ctx), srv.ListPolicyVersions)
	})
	r.GET("/api/v1/admin/policies", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListPolicies_FullMethodName, &ListPoliciesRequest{}, srv.ListPolicies)
	})
	r.GET("/api/v1/admin/audit", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		in := ListAuditRequest{Subject: q.Get("subject"), Action: q.Get("action"), Actor: q.Get("actor")}
		if raw := q.Get("afterSeq"); raw != "" {
			v, err := strconv.ParseInt(raw, 10, 64)
			if err != nil || v < 0 {
				return InvalidArgument("afterSeq", "must be a non-negative integer")
			}
			in.AfterSeq = v
		}
		if raw := q.Get("limit"); raw != "" {
			v, err := strconv.ParseUint(raw, 10, 32)
			if err != nil || v == 0 || v > 1000 {
				return InvalidArgument("limit", "must be an integer from 1 to 1000")
			}
			in.Limit = uint32(v)
		}
		if raw := q.Get("since"); raw != "" {
			at, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				return InvalidArgument("since", "must be an RFC 3339 time, e.g. 2026-11-29T00:00:00Z")
			}
			in.Since = timestamppb.New(at)
		}
		return serve(ctx, AdminService_ListAudit_FullMethodName, &in, srv.ListAudit)
	})
	r.GET("/api/v1/admin/audit/verify", func(ctx http.Context) error {
		return serve(ctx, AdminService_VerifyAudit_FullMethodName, &VerifyAuditRequest{}, srv.VerifyAudit)
	})
	r.POST("/api/v1/admin/webhooks", func(ctx http.Context) error {
		var in CreateWebhookRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		return serve(ctx, AdminService_CreateWebhook_FullMethodName, &in, srv.CreateWebhook)
	})
	r.GET("/api/v1/admin/webhooks", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListWebhooks_FullMethodName, &ListWebhooksRequest{}, srv.ListWebhooks)
	})
	webhookOf := func(ctx http.Context) *WebhookRequest {
		return &WebhookRequest{SubscriptionId: ctx.Vars().Get("subscription_id")}
	}
	r.GET("/api/v1/admin/webhooks/{subscription_id}", func(ctx http.Context) error {
		return serve(ctx, AdminService_GetWebhook_FullMethodName, webhookOf(ctx), srv.GetWebhook)
	})
	r.DELETE("/api/v1/admin/webhooks/{subscription_id}", func(ctx http.Context) error {
		return serve(ctx, AdminService_DeleteWebhook_FullMethodName, webhookOf(ctx), srv.DeleteWebhook)
	})
	r.POST("/api/v1/admin/webhooks/{subscription_id}/pause", func(ctx http.Context) error {
		return serve(ctx, AdminService_PauseWebhook_FullMethodName, webhookOf(ctx), srv.PauseWebhook)
	})
	r.POST("/api/v1/admin/webhooks/{subscription_id}/resume", func(ctx http.Context) error {
		return serve(ctx, AdminService_ResumeWebhook_FullMethodName, webhookOf(ctx), srv.ResumeWebhook)
	})
	r.PUT("/api/v1/admin/signers/{signer}/funding", func(ctx http.Context) error {
		var in SetFundingRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		in.Signer = ctx.Vars().Get("signer")
		return serve(ctx, AdminService_SetFunding_FullMethodName, &in, srv.SetFunding)
	})
	fundingOf := func(ctx http.Context) (*FundingRequest, error) {
		chainID, err := queryChainID(ctx.Request().URL.Query())
		return &FundingRequest{Signer: ctx.Vars().Get("signer"), ChainId: chainID}, err
	}
	r.GET("/api/v1/admin/signers/{signer}/funding", func(ctx http.Context) error {
		in, err := fundingOf(ctx)
		if err != nil {
			return err
		}
		return serve(ctx, AdminService_GetFunding_FullMethodName, in, srv.GetFunding)
	})
	r.DELETE("/api/v1/admin/signers/{signer}/funding", func(ctx http.Context) error {
		in, err := fundingOf(ctx)
		if err != nil {
			return err
		}
		return serve(ctx, AdminService_DeleteFunding_FullMethodName, in, srv.DeleteFunding)
	})
	r.POST("/api/v1/admin/webhooks/{subscription_id}/replay", func(ctx http.Context) error {
		var in ReplayWebhookRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		in.SubscriptionId = ctx.Vars().Get("subscription_id")
		return serve(ctx, AdminService_ReplayWebhook_FullMethodName, &in, srv.ReplayWebhook)
	})
}
