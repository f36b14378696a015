package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Check 1 (docs/design.md#how-the-promises-are-checked): 100 concurrent creates with the same (signer, requestId) through the
// HTTP API produce exactly one managed_tx, and all 100 answers carry its txId.
func TestConcurrentCreatesWithOneRequestIDMakeOneTransaction(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{})
	signer, to := devAddress(t, 0), devAddress(t, 1)
	payload := map[string]any{"signer": signer, "to": to, "value": "12345", "gasLimit": 21000, "requestId": "invoice-42"}

	answers := createConcurrently(t, s, 100, 100, func(int) map[string]any { return payload })
	requireStatus(t, answers, http.StatusAccepted, http.StatusOK)
	ids := requireOneTxID(t, answers)
	if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND request_id = 'invoice-42'", signer); n != 1 {
		t.Fatalf("managed_tx rows = %d, want 1", n)
	}
	if n := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); n != 1 {
		t.Fatalf("cursor = %d, want 1: replays must consume no nonce", n)
	}

	// The same requestId with another intent is a conflict and still consumes nothing.
	conflict := s.create(t, map[string]any{"signer": signer, "to": to, "value": "99", "gasLimit": 21000, "requestId": "invoice-42"})
	if conflict.status != http.StatusConflict || conflict.reason() != "IDEMPOTENCY_CONFLICT" {
		t.Fatalf("different intent: %d %s, want 409 IDEMPOTENCY_CONFLICT", conflict.status, conflict.raw)
	}
	byRequest := s.do(t, http.MethodGet, "/api/v1/tx/by-request?signer="+signer+"&requestId=invoice-42", nil)
	if byRequest.status != http.StatusOK || byRequest.body["txId"] == nil {
		t.Fatalf("by-request: %d %s", byRequest.status, byRequest.raw)
	}
	for id := range ids {
		if byRequest.body["txId"] != id {
			t.Fatalf("by-request txId = %v, want %s", byRequest.body["txId"], id)
		}
		got := s.do(t, http.MethodGet, "/api/v1/tx/"+id, nil)
		if got.status != http.StatusOK || got.body["requestId"] != "invoice-42" || got.body["value"] != "12345" {
			t.Fatalf("GET tx: %d %s", got.status, got.raw)
		}
	}
}

// Check 2 (docs/design.md#how-the-promises-are-checked): 1000 concurrent creates for one signer, half over HTTP and half over
// gRPC, get nonces 0..999 with no duplicate and no gap (chain term disabled).
func TestThousandConcurrentCreatesGetContiguousNonces(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{chainQuery: false})
	signer, to := devAddress(t, 2), devAddress(t, 3)
	const total = 1000
	nonces := make([]uint64, total)
	errs := make([]error, total)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := range total {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			value := fmt.Sprint(i + 1)
			if i%2 == 0 {
				a := s.create(t, map[string]any{"signer": signer, "to": to, "value": value, "gasLimit": 21000})
				if a.status != http.StatusAccepted {
					errs[i] = fmt.Errorf("http %d: %s", a.status, a.raw)
					return
				}
				_, err := fmt.Sscan(a.tx()["nonce"].(string), &nonces[i])
				errs[i] = err
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			resp, err := s.grpc.CreateTx(ctx, &v1.CreateTxRequest{Signer: signer, To: to, Value: value, GasLimit: 21000})
			if err != nil {
				errs[i] = fmt.Errorf("grpc: %w", err)
				return
			}
			if !resp.GetCreated() {
				errs[i] = fmt.Errorf("grpc: created=false without a requestId")
			}
			nonces[i] = resp.GetTx().GetNonce()
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	requireContiguousNonces(t, nonces)
	if n := s.count(t, "SELECT count(DISTINCT nonce) FROM managed_tx WHERE signer = $1 AND nonce BETWEEN 0 AND 999", signer); n != total {
		t.Fatalf("distinct stored nonces = %d, want %d", n, total)
	}
	if n := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); n != total {
		t.Fatalf("cursor = %d, want %d", n, total)
	}
}

// Invalid input gets 400/422 with a stable reason and moves no cursor.
func TestInvalidInputIsRejectedWithoutConsumingANonce(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Server.MaxBodyBytes = 64 << 10
		bc.Create.MaxDataBytes = 16 << 10
	}})
	signer, to := devAddress(t, 4), devAddress(t, 5)
	// One good create so the signer has a cursor to watch.
	if a := s.create(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000}); a.status != http.StatusAccepted {
		t.Fatalf("baseline create: %d %s", a.status, a.raw)
	}
	stranger := "0x000000000000000000000000000000000000dEaD"
	tests := []struct {
		name       string
		body       string
		wantStatus int
		wantReason string
	}{
		{"malformed JSON", `{"signer": "` + signer + `", "to": `, 400, "INVALID_ARGUMENT"},
		{"not an object", `[1,2,3]`, 400, "INVALID_ARGUMENT"},
		{"empty body", ``, 400, "INVALID_ARGUMENT"},
		{"unknown field", `{"signer":"` + signer + `","to":"` + to + `","gasLimt":21000}`, 400, "INVALID_ARGUMENT"},
		{"wrong type", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":"lots"}`, 400, "INVALID_ARGUMENT"},
		{"duplicate field", `{"signer":"` + signer + `","to":"` + to + `","to":"` + to + `","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"bad signer address", `{"signer":"0x12345","to":"` + to + `","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"bad checksum", `{"signer":"` + signer + `","to":"` + strings.ToUpper(to[:3]) + to[3:] + `","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"bad hex data", `{"signer":"` + signer + `","to":"` + to + `","data":"0xzz","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"odd hex data", `{"signer":"` + signer + `","to":"` + to + `","data":"0xabc","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"gas under the intrinsic cost of a creation", `{"signer":"` + signer + `","data":"0x6000","gasLimit":53021}`, 400, "INVALID_ARGUMENT"},
		{"gas under Prague's call-data floor", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":40000,"data":"0x` + strings.Repeat("ab", 1000) + `"}`, 400, "INVALID_ARGUMENT"},
		{"negative value", `{"signer":"` + signer + `","to":"` + to + `","value":"-5","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"overflowing value", `{"signer":"` + signer + `","to":"` + to + `","value":"0x1` + strings.Repeat("0", 64) + `","gasLimit":21000}`, 400, "INVALID_ARGUMENT"},
		{"gas limit too low", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":100}`, 400, "INVALID_ARGUMENT"},
		{"sql-looking request id", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":21000,"requestId":"1'; DROP TABLE managed_tx;--"}`, 400, "INVALID_ARGUMENT"},
		{"oversize data field", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":21000,"data":"0x` + strings.Repeat("ab", 20<<10) + `"}`, 400, "INVALID_ARGUMENT"},
		{"oversize body", `{"signer":"` + signer + `","to":"` + to + `","gasLimit":21000,"data":"0x` + strings.Repeat("ab", 40<<10) + `"}`, 400, "REQUEST_TOO_LARGE"},
		{"unknown signer", `{"signer":"` + stranger + `","to":"` + to + `","gasLimit":21000}`, 422, "UNKNOWN_SIGNER"},
		{"reverting intent (gas estimated)", `{"signer":"` + signer + `","data":"0x60006000fd"}`, 422, "INTENT_REVERTS"},
	}
	cursorBefore := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer)
	rowsBefore := s.count(t, "SELECT count(*) FROM managed_tx")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := s.do(t, http.MethodPost, "/api/v1/tx", []byte(tc.body))
			if a.status != tc.wantStatus || a.reason() != tc.wantReason {
				t.Fatalf("got %d %s, want %d %s", a.status, a.raw, tc.wantStatus, tc.wantReason)
			}
			if msg, _ := a.body["message"].(string); msg == "" {
				t.Fatalf("no message in %s", a.raw)
			}
		})
	}
	if after := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); after != cursorBefore {
		t.Fatalf("cursor moved from %d to %d on rejected input", cursorBefore, after)
	}
	if after := s.count(t, "SELECT count(*) FROM managed_tx"); after != rowsBefore {
		t.Fatalf("managed_tx grew from %d to %d on rejected input", rowsBefore, after)
	}

	// Reads: a malformed id is 400, an unknown one 404.
	for path, want := range map[string]int{
		"/api/v1/tx/not-a-uuid":                                        400,
		"/api/v1/tx/" + "01a200aa-de74-77dd-9841-198a19e3eb72":         404,
		"/api/v1/tx/by-request?signer=" + signer + "&requestId=nobody": 404,
		"/api/v1/tx/by-request?signer=nonsense&requestId=x":            400,
		"/api/v1/tx/completions?after=garbage":                         400,
		"/api/v1/tx/completions?limit=5000":                            400,
	} {
		if a := s.do(t, http.MethodGet, path, nil); a.status != want || a.reason() == "" {
			t.Errorf("GET %s = %d %s, want %d with a reason", path, a.status, a.raw, want)
		}
	}
}

// An intent without a gas limit is estimated before allocation.
func TestGasIsEstimatedWhenMissing(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{})
	signer, to := devAddress(t, 6), devAddress(t, 7)
	a := s.create(t, map[string]any{"signer": signer, "to": to, "value": fmt.Sprint(rand.IntN(1000) + 1)})
	if a.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	if gas := a.tx()["gasLimit"]; gas != "25200" {
		t.Fatalf("gasLimit = %v, want 25200 (21000 estimated, padded by 1.2)", gas)
	}
}
