package controllers_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-kratos/kratos/v2/log"
	khttp "github.com/go-kratos/kratos/v2/transport/http"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/controllers"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/testsupport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestPayoutsAPI(t *testing.T) {
	db := testsupport.NewDatabase(t)
	svc := services.NewPayoutService(db.Tx, repositories.NewPayoutRepository(), repositories.NewOutboxRepository())
	srv := khttp.NewServer()
	controllers.NewPayoutController(svc, log.DefaultLogger).Register(srv.Route("/"))
	const to = testsupport.Recipient
	do := func(method, path, body, key string) (int, map[string]any) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		var out map[string]any
		_ = json.Unmarshal(rec.Body.Bytes(), &out)
		return rec.Code, out
	}
	code, first := do(http.MethodPost, "/v1/payouts", `{"to":"`+to+`","amount":"5"}`, "k1")
	if code != http.StatusCreated || first["status"] != "PENDING" {
		t.Fatalf("create: %d %v", code, first)
	}
	id, _ := first["id"].(string)

	tests := []struct {
		name, method, path, body, key string
		wantCode                      int
		wantReason                    string
	}{
		{"read back", http.MethodGet, "/v1/payouts/" + id, "", "", http.StatusOK, ""},
		{"replay of the key", http.MethodPost, "/v1/payouts", `{"to":"` + to + `","amount":"5"}`, "k1", http.StatusOK, ""},
		{"key reused for another payout", http.MethodPost, "/v1/payouts", `{"to":"` + to + `","amount":"6"}`, "k1", http.StatusConflict, "IDEMPOTENCY_CONFLICT"},
		{"not JSON", http.MethodPost, "/v1/payouts", `to=0x1`, "", http.StatusBadRequest, "INVALID_JSON"},
		{"unknown field", http.MethodPost, "/v1/payouts", `{"to":"` + to + `","amount":"5","memo":"x"}`, "", http.StatusBadRequest, "INVALID_JSON"},
		{"amount as a number", http.MethodPost, "/v1/payouts", `{"to":"` + to + `","amount":5}`, "", http.StatusBadRequest, "INVALID_JSON"},
		{"bad address", http.MethodPost, "/v1/payouts", `{"to":"0x12","amount":"5"}`, "", http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"zero amount", http.MethodPost, "/v1/payouts", `{"to":"` + to + `","amount":"0"}`, "", http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"huge body", http.MethodPost, "/v1/payouts", `{"to":"` + strings.Repeat("a", 20000) + `"}`, "", http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE"},
		{"id not a UUID", http.MethodGet, "/v1/payouts/42", "", "", http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"unknown id", http.MethodGet, "/v1/payouts/00000000-0000-0000-0000-000000000000", "", "", http.StatusNotFound, "NOT_FOUND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := do(tt.method, tt.path, tt.body, tt.key)
			if code != tt.wantCode || (tt.wantReason != "" && out["reason"] != tt.wantReason) {
				t.Fatalf("%d %v, want %d %s", code, out, tt.wantCode, tt.wantReason)
			}
			if tt.wantCode == http.StatusOK && out["id"] != id {
				t.Fatalf("answered payout %v, want %s", out["id"], id)
			}
		})
	}
	if n := 0; db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM payouts").Scan(&n) != nil || n != 1 {
		t.Fatalf("%d payouts stored, want 1 (the refused requests store nothing)", n)
	}
}
