package v1

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/transport"
	"github.com/go-kratos/kratos/v2/transport/http"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// recordingServer answers every route with an empty reply of the right type and records
// the request the route decoded.
type recordingServer struct{ got proto.Message }

func record[Out any](s *recordingServer, in proto.Message, out *Out) (*Out, error) {
	s.got = in
	return out, nil
}

func (s *recordingServer) CreateTx(_ context.Context, in *CreateTxRequest) (*CreateTxResponse, error) {
	return record(s, in, &CreateTxResponse{Created: true})
}
func (s *recordingServer) CreateTxBatch(_ context.Context, in *CreateTxBatchRequest) (*CreateTxBatchResponse, error) {
	return record(s, in, &CreateTxBatchResponse{})
}
func (s *recordingServer) GetTx(_ context.Context, in *GetTxRequest) (*Tx, error) {
	return record(s, in, &Tx{})
}
func (s *recordingServer) GetTxByRequest(_ context.Context, in *GetTxByRequestRequest) (*Tx, error) {
	return record(s, in, &Tx{})
}
func (s *recordingServer) ListCompletions(_ context.Context, in *ListCompletionsRequest) (*ListCompletionsResponse, error) {
	return record(s, in, &ListCompletionsResponse{})
}
func (s *recordingServer) ListApprovals(_ context.Context, in *ListApprovalsRequest) (*ListApprovalsResponse, error) {
	return record(s, in, &ListApprovalsResponse{})
}
func (s *recordingServer) GetApproval(_ context.Context, in *GetApprovalRequest) (*Approval, error) {
	return record(s, in, &Approval{})
}
func (s *recordingServer) ApproveTx(_ context.Context, in *DecideApprovalRequest) (*Approval, error) {
	return record(s, in, &Approval{})
}
func (s *recordingServer) RejectTx(_ context.Context, in *DecideApprovalRequest) (*Approval, error) {
	return record(s, in, &Approval{})
}
func (s *recordingServer) CreateWebhook(_ context.Context, in *CreateWebhookRequest) (*CreateWebhookResponse, error) {
	return record(s, in, &CreateWebhookResponse{})
}
func (s *recordingServer) ListWebhooks(_ context.Context, in *ListWebhooksRequest) (*ListWebhooksResponse, error) {
	return record(s, in, &ListWebhooksResponse{})
}
func (s *recordingServer) GetWebhook(_ context.Context, in *WebhookRequest) (*Webhook, error) {
	return record(s, in, &Webhook{})
}
func (s *recordingServer) PauseWebhook(_ context.Context, in *WebhookRequest) (*Webhook, error) {
	return record(s, in, &Webhook{})
}
func (s *recordingServer) ResumeWebhook(_ context.Context, in *WebhookRequest) (*Webhook, error) {
	return record(s, in, &Webhook{})
}
func (s *recordingServer) ReplayWebhook(_ context.Context, in *ReplayWebhookRequest) (*Webhook, error) {
	return record(s, in, &Webhook{})
}
func (s *recordingServer) DeleteWebhook(_ context.Context, in *WebhookRequest) (*DeleteWebhookResponse, error) {
	return record(s, in, &DeleteWebhookResponse{})
}
func (s *recordingServer) SetFunding(_ context.Context, in *SetFundingRequest) (*SignerFunding, error) {
	return record(s, in, &SignerFunding{})
}
func (s *recordingServer) GetFunding(_ context.Context, in *FundingRequest) (*SignerFunding, error) {
	return record(s, in, &SignerFunding{})
}
func (s *recordingServer) DeleteFunding(_ context.Context, in *FundingRequest) (*DeleteFundingResponse, error) {
	return record(s, in, &DeleteFundingResponse{})
}
func (s *recordingServer) ResolveTx(_ context.Context, in *ResolveTxRequest) (*ResolveTxResponse, error) {
	return record(s, in, &ResolveTxResponse{})
}
func (s *recordingServer) GetSignerStatus(_ context.Context, in *GetSignerStatusRequest) (*SignerStatus, error) {
	return record(s, in, &SignerStatus{})
}
func (s *recordingServer) ListSigners(_ context.Context, in *ListSignersRequest) (*ListSignersResponse, error) {
	return record(s, in, &ListSignersResponse{})
}
func (s *recordingServer) ListStuck(_ context.Context, in *ListStuckRequest) (*ListStuckResponse, error) {
	return record(s, in, &ListStuckResponse{})
}
func (s *recordingServer) ListNodes(_ context.Context, in *ListNodesRequest) (*ListNodesResponse, error) {
	return record(s, in, &ListNodesResponse{})
}
func (s *recordingServer) GetQuarantine(_ context.Context, in *GetQuarantineRequest) (*Quarantine, error) {
	return record(s, in, &Quarantine{})
}
func (s *recordingServer) ReleaseSigner(_ context.Context, in *ReleaseSignerRequest) (*Quarantine, error) {
	return record(s, in, &Quarantine{})
}
func (s *recordingServer) AddSigner(_ context.Context, in *AddSignerRequest) (*RosterSigner, error) {
	return record(s, in, &RosterSigner{})
}
func (s *recordingServer) RetireSigner(_ context.Context, in *RetireSignerRequest) (*RosterSigner, error) {
	return record(s, in, &RosterSigner{})
}
func (s *recordingServer) ListRoster(_ context.Context, in *ListRosterRequest) (*ListRosterResponse, error) {
	return record(s, in, &ListRosterResponse{})
}
func (s *recordingServer) PauseSigner(_ context.Context, in *PauseSignerRequest) (*RosterSigner, error) {
	return record(s, in, &RosterSigner{})
}
func (s *recordingServer) ResumeSigner(_ context.Context, in *PauseSignerRequest) (*RosterSigner, error) {
	return record(s, in, &RosterSigner{})
}
func (s *recordingServer) SetPolicy(_ context.Context, in *SetPolicyRequest) (*Policy, error) {
	return record(s, in, &Policy{})
}
func (s *recordingServer) GetPolicy(_ context.Context, in *PolicyScopeRequest) (*Policy, error) {
	return record(s, in, &Policy{})
}
func (s *recordingServer) DeletePolicy(_ context.Context, in *PolicyScopeRequest) (*DeletePolicyResponse, error) {
	return record(s, in, &DeletePolicyResponse{})
}
func (s *recordingServer) ListPolicies(_ context.Context, in *ListPoliciesRequest) (*ListPoliciesResponse, error) {
	return record(s, in, &ListPoliciesResponse{})
}
func (s *recordingServer) ListPolicyVersions(_ context.Context, in *PolicyScopeRequest) (*ListPolicyVersionsResponse, error) {
	return record(s, in, &ListPolicyVersionsResponse{})
}
func (s *recordingServer) ListAudit(_ context.Context, in *ListAuditRequest) (*ListAuditResponse, error) {
	return record(s, in, &ListAuditResponse{})
}
func (s *recordingServer) VerifyAudit(_ context.Context, in *VerifyAuditRequest) (*VerifyAuditResponse, error) {
	return record(s, in, &VerifyAuditResponse{})
}

// Every HTTP route decodes its path, query and body into the request the gRPC method takes,
// runs under that method's name (what middleware sees), answers with the right status, and
// refuses a malformed query parameter with 400 before the method runs.
func TestEveryRouteReachesItsMethod(t *testing.T) {
	srv := &recordingServer{}
	var operation string
	server := http.NewServer(http.Middleware(func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req any) (any, error) {
			if tr, ok := transport.FromServerContext(ctx); ok {
				operation = tr.Operation()
			}
			return next(ctx, req)
		}
	}))
	RegisterTxServiceHTTPServer(server, srv, HTTPOptions{MaxBodyBytes: 1 << 16, MaxBatchBodyBytes: 1 << 20})
	RegisterAdminServiceHTTPServer(server, srv, HTTPOptions{MaxBodyBytes: 1 << 16})
	const signer = "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"
	tests := []struct {
		method, path, body string
		wantStatus         int
		wantOperation      string
		want               string // the decoded request, as protojson (empty: not reached)
	}{
		{"POST", "/api/v1/tx", `{"signer":"` + signer + `","value":"1","requestId":"r-1"}`, 202, TxService_CreateTx_FullMethodName, `{"signer":"` + signer + `","value":"1","requestId":"r-1"}`},
		{"POST", "/api/v1/tx:batch", `{"creates":[{"signer":"` + signer + `","value":"1","requestId":"r-1"},{"signer":"` + signer + `","requestId":"r-2"}]}`, 200, TxService_CreateTxBatch_FullMethodName,
			`{"creates":[{"signer":"` + signer + `","value":"1","requestId":"r-1"},{"signer":"` + signer + `","requestId":"r-2"}]}`},
		{"POST", "/api/v1/tx:batch", `{"creates":[{"signer":1}]}`, 400, "", ""},
		{"GET", "/api/v1/tx/abc?wait=2", "", 200, TxService_GetTx_FullMethodName, `{"txId":"abc","wait":"2s"}`},
		{"GET", "/api/v1/tx/abc?wait=soon", "", 400, "", ""},
		{"GET", "/api/v1/tx/by-request?signer=" + signer + "&request_id=r-1&chainId=5&wait=500ms", "", 200, TxService_GetTxByRequest_FullMethodName, `{"signer":"` + signer + `","requestId":"r-1","chainId":"5","wait":"0.500s"}`},
		{"GET", "/api/v1/tx/by-request?signer=" + signer + "&requestId=r-1&chainId=0", "", 400, "", ""},
		{"GET", "/api/v1/tx/completions?after=c&limit=10&wait=1s&chain_id=7", "", 200, TxService_ListCompletions_FullMethodName, `{"after":"c","limit":10,"wait":"1s","chainId":"7"}`},
		{"GET", "/api/v1/tx/completions?limit=-1", "", 400, "", ""},
		{"GET", "/api/v1/approvals?state=AWAITING_APPROVAL&signer=" + signer + "&before=b&limit=20", "", 200, TxService_ListApprovals_FullMethodName,
			`{"state":"AWAITING_APPROVAL","signer":"` + signer + `","before":"b","limit":20}`},
		{"GET", "/api/v1/approvals?limit=x", "", 400, "", ""},
		{"GET", "/api/v1/approvals/abc", "", 200, TxService_GetApproval_FullMethodName, `{"approvalId":"abc"}`},
		{"POST", "/api/v1/approvals/abc/approve", `{"note":"checked"}`, 200, TxService_ApproveTx_FullMethodName, `{"approvalId":"abc","note":"checked"}`},
		{"POST", "/api/v1/approvals/abc/approve", "", 200, TxService_ApproveTx_FullMethodName, `{"approvalId":"abc"}`},
		{"POST", "/api/v1/approvals/abc/reject", `{"note":"not ours"}`, 200, TxService_RejectTx_FullMethodName, `{"approvalId":"abc","note":"not ours"}`},
		{"POST", "/api/v1/approvals/abc/reject", `{"note":7}`, 400, "", ""},
		{"POST", "/api/v1/admin/tx/abc/resolve", `{"action":"CANCEL","reason":"stuck"}`, 200, AdminService_ResolveTx_FullMethodName, `{"txId":"abc","action":"CANCEL","reason":"stuck"}`},
		{"GET", "/api/v1/admin/signers/" + signer + "?chainId=3", "", 200, AdminService_GetSignerStatus_FullMethodName, `{"signer":"` + signer + `","chainId":"3"}`},
		{"GET", "/api/v1/admin/signers", "", 200, AdminService_ListSigners_FullMethodName, `{}`},
		{"GET", "/api/v1/admin/stuck?signer=" + signer + "&limit=5", "", 200, AdminService_ListStuck_FullMethodName, `{"signer":"` + signer + `","limit":5}`},
		{"GET", "/api/v1/admin/nodes", "", 200, AdminService_ListNodes_FullMethodName, `{}`},
		{"GET", "/api/v1/admin/signers/" + signer + "/quarantine?fromNonce=9&nonces=true&limit=2", "", 200, AdminService_GetQuarantine_FullMethodName, ""},
		{"GET", "/api/v1/admin/signers/" + signer + "/quarantine?from_nonce=x", "", 400, "", ""},
		{"POST", "/api/v1/admin/signers/" + signer + "/release", `{"note":"checked"}`, 200, AdminService_ReleaseSigner_FullMethodName, `{"signer":"` + signer + `","note":"checked"}`},
		{"POST", "/api/v1/admin/roster", `{"signer":"` + signer + `","source":"raw"}`, 200, AdminService_AddSigner_FullMethodName, `{"signer":"` + signer + `","source":"raw"}`},
		{"POST", "/api/v1/admin/roster/" + signer + "/retire", `{"note":"rotated"}`, 200, AdminService_RetireSigner_FullMethodName, `{"signer":"` + signer + `","note":"rotated"}`},
		{"GET", "/api/v1/admin/roster", "", 200, AdminService_ListRoster_FullMethodName, `{}`},
		{"POST", "/api/v1/admin/roster", `{"signer":1}`, 400, "", ""},
		{"POST", "/api/v1/admin/roster/" + signer + "/pause", `{"note":"leak"}`, 200, AdminService_PauseSigner_FullMethodName, `{"signer":"` + signer + `","note":"leak"}`},
		{"POST", "/api/v1/admin/roster/" + signer + "/resume", "", 200, AdminService_ResumeSigner_FullMethodName, `{"signer":"` + signer + `"}`},
		{"PUT", "/api/v1/admin/policies/signer/" + signer, `{"policy":{"maxValuePerTx":"10"}}`, 200, AdminService_SetPolicy_FullMethodName,
			`{"scopeKind":"signer","scope":"` + signer + `","policy":{"maxValuePerTx":"10"}}`},
		{"PUT", "/api/v1/admin/policies/signer/" + signer, `{"policy":"x"}`, 400, "", ""},
		{"GET", "/api/v1/admin/policies/credential/payouts", "", 200, AdminService_GetPolicy_FullMethodName, `{"scopeKind":"credential","scope":"payouts"}`},
		{"DELETE", "/api/v1/admin/policies/credential/payouts", "", 200, AdminService_DeletePolicy_FullMethodName, `{"scopeKind":"credential","scope":"payouts"}`},
		{"GET", "/api/v1/admin/policies/credential/payouts/versions", "", 200, AdminService_ListPolicyVersions_FullMethodName, `{"scopeKind":"credential","scope":"payouts"}`},
		{"GET", "/api/v1/admin/policies", "", 200, AdminService_ListPolicies_FullMethodName, `{}`},
		{"GET", "/api/v1/admin/audit?afterSeq=4&action=policy.set&limit=10&since=2026-11-29T00:00:00Z", "", 200, AdminService_ListAudit_FullMethodName,
			`{"afterSeq":"4","action":"policy.set","limit":10,"since":"2026-11-29T00:00:00Z"}`},
		{"GET", "/api/v1/admin/audit?afterSeq=-1", "", 400, "", ""},
		{"GET", "/api/v1/admin/audit?limit=5000", "", 400, "", ""},
		{"GET", "/api/v1/admin/audit?since=yesterday", "", 400, "", ""},
		{"GET", "/api/v1/admin/audit/verify", "", 200, AdminService_VerifyAudit_FullMethodName, `{}`},
		{"POST", "/api/v1/admin/webhooks", `{"url":"https://example.com/hook","states":["CONFIRMED"],"fromStart":true}`, 200, AdminService_CreateWebhook_FullMethodName,
			`{"url":"https://example.com/hook","states":["CONFIRMED"],"fromStart":true}`},
		{"POST", "/api/v1/admin/webhooks", `{"url":7}`, 400, "", ""},
		{"GET", "/api/v1/admin/webhooks", "", 200, AdminService_ListWebhooks_FullMethodName, `{}`},
		{"GET", "/api/v1/admin/webhooks/w1", "", 200, AdminService_GetWebhook_FullMethodName, `{"subscriptionId":"w1"}`},
		{"DELETE", "/api/v1/admin/webhooks/w1", "", 200, AdminService_DeleteWebhook_FullMethodName, `{"subscriptionId":"w1"}`},
		{"POST", "/api/v1/admin/webhooks/w1/pause", "", 200, AdminService_PauseWebhook_FullMethodName, `{"subscriptionId":"w1"}`},
		{"POST", "/api/v1/admin/webhooks/w1/resume", "", 200, AdminService_ResumeWebhook_FullMethodName, `{"subscriptionId":"w1"}`},
		{"POST", "/api/v1/admin/webhooks/w1/replay", `{"cursor":"42"}`, 200, AdminService_ReplayWebhook_FullMethodName, `{"subscriptionId":"w1","cursor":"42"}`},
		{"PUT", "/api/v1/admin/signers/" + signer + "/funding", `{"lowWater":"1","highWater":"2"}`, 200, AdminService_SetFunding_FullMethodName,
			`{"signer":"` + signer + `","lowWater":"1","highWater":"2"}`},
		{"GET", "/api/v1/admin/signers/" + signer + "/funding?chainId=5", "", 200, AdminService_GetFunding_FullMethodName, `{"signer":"` + signer + `","chainId":"5"}`},
		{"GET", "/api/v1/admin/signers/" + signer + "/funding?chainId=x", "", 400, "", ""},
		{"DELETE", "/api/v1/admin/signers/" + signer + "/funding", "", 200, AdminService_DeleteFunding_FullMethodName, `{"signer":"` + signer + `"}`},
	}
	for _, tc := range tests {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			srv.got, operation = nil, ""
			req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			rec := httptest.NewRecorder()
			server.ServeHTTP(rec, req)
			if rec.Code != tc.wantStatus {
				t.Fatalf("status %d (%s), want %d", rec.Code, rec.Body.String(), tc.wantStatus)
			}
			if operation != tc.wantOperation {
				t.Errorf("operation %q, want %q", operation, tc.wantOperation)
			}
			if tc.wantOperation == "" {
				if srv.got != nil {
					t.Errorf("a refused request reached the method with %v", srv.got)
				}
				return
			}
			if srv.got == nil {
				t.Fatal("the method was not called")
			}
			if tc.want == "" {
				return
			}
			want := srv.got.ProtoReflect().New().Interface()
			if err := protojson.Unmarshal([]byte(tc.want), want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(srv.got, want) {
				t.Errorf("decoded %v, want %v", srv.got, want)
			}
		})
	}
}
