package server

import (
	"context"
	"testing"

	kerrors "github.com/go-kratos/kratos/v2/errors"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// A text field holding a NUL character is refused before the handler, naming the field,
// nested ones included: PostgreSQL's text cannot store it, and the insert's failure would be
// answered 500.
func TestTextWithANULIsRefusedNamingItsField(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		req       any
		wantField string // "" : passed to the handler
	}{
		{"a clean create", &v1.CreateTxRequest{Signer: "0xabc", RequestId: "pay-1"}, ""},
		{"a webhook's description", &v1.CreateWebhookRequest{Url: "https://hooks.example/x", Description: "a\x00b"}, "description"},
		// Each create of a batch is answered on its own: its own parsing refuses it alone.
		{"a request id inside a batch", &v1.CreateTxBatchRequest{Creates: []*v1.CreateTxRequest{{RequestId: "ok"}, {RequestId: "x\x00"}}}, ""},
		{"a request id inside a forwarded batch", &v1.ForwardCreatesRequest{Creates: []*v1.CreateTxRequest{{RequestId: "x\x00"}}}, ""},
		{"an approver's note", &v1.DecideApprovalRequest{ApprovalId: "a", Note: "\x00"}, "note"},
		{"not a message", "plain", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			called := false
			_, err := refuseNULs()(func(context.Context, any) (any, error) { called = true; return nil, nil })(context.Background(), tt.req)
			if tt.wantField == "" {
				if err != nil || !called {
					t.Fatalf("%v (handler called %t), want passed", err, called)
				}
				return
			}
			se := kerrors.FromError(err)
			if called || se == nil || se.Code != 400 || se.Metadata["field"] != tt.wantField {
				t.Fatalf("%v (handler called %t), want 400 on %s", err, called, tt.wantField)
			}
		})
	}
}
