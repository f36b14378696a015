package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// batchAnswer is a POST /api/v1/tx:batch answer.
type batchAnswer struct {
	status int
	raw    string
	body   struct {
		Results []struct {
			Response *struct {
				Tx struct {
					TxID  string `json:"txId"`
					Nonce string `json:"nonce"`
					State string `json:"state"`
				} `json:"tx"`
				Created bool `json:"created"`
			} `json:"response"`
			Error *struct {
				HTTPStatus int               `json:"httpStatus"`
				Reason     string            `json:"reason"`
				Message    string            `json:"message"`
				Metadata   map[string]string `json:"metadata"`
			} `json:"error"`
		} `json:"results"`
		Created  int `json:"created"`
		Replayed int `json:"replayed"`
		Refused  int `json:"refused"`
		Reason   string
	}
}

func (s *testService) batch(t *testing.T, creates []map[string]any) batchAnswer {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"creates": creates})
	a := s.do(t, http.MethodPost, "/api/v1/tx:batch", body)
	out := batchAnswer{status: a.status, raw: a.raw}
	if err := json.Unmarshal([]byte(a.raw), &out.body); err != nil {
		t.Fatalf("batch answer %d %s: %v", a.status, a.raw, err)
	}
	out.body.Reason = a.reason()
	return out
}

// Batches of creates: each create answered on its own, in order, with what CreateTx would
// answer; a bad batch refused whole with a clear error and nothing written; a bad create
// refused alone while the others proceed; nothing lost.
func TestBatchCreates(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{signers: 2})
	transfer := func(signer int, requestID string) map[string]any {
		return map[string]any{"signer": devAddress(t, signer), "to": devAddress(t, 5), "value": "1", "gasLimit": 21000, "requestId": requestID}
	}
	rows := func(prefix string) int64 {
		return s.count(t, `SELECT count(*) FROM managed_tx WHERE request_id LIKE $1`, prefix+"%")
	}

	// 200 creates over two signers: all created, in order, nonces without gaps; the same
	// batch again replays every one.
	var creates []map[string]any
	for i := range 200 {
		creates = append(creates, transfer(i%2, fmt.Sprintf("bulk-%03d", i)))
	}
	first := s.batch(t, creates)
	if first.status != http.StatusOK || first.body.Created != 200 || len(first.body.Results) != 200 {
		t.Fatalf("a batch of 200: %d created %d of %d results: %.300s", first.status, first.body.Created, len(first.body.Results), first.raw)
	}
	nonces := map[string][]uint64{}
	for i, r := range first.body.Results {
		if r.Response == nil || !r.Response.Created {
			t.Fatalf("result %d: %+v", i, r)
		}
		var n uint64
		_, _ = fmt.Sscan(r.Response.Tx.Nonce, &n)
		signer := devAddress(t, i%2)
		nonces[signer] = append(nonces[signer], n)
		var requestID string
		if err := s.pool.QueryRow(t.Context(), `SELECT request_id FROM managed_tx WHERE tx_id = $1`, r.Response.Tx.TxID).Scan(&requestID); err != nil || requestID != fmt.Sprintf("bulk-%03d", i) {
			t.Fatalf("result %d answers transaction of request %q (%v): results out of order", i, requestID, err)
		}
	}
	for signer, got := range nonces {
		seen := map[uint64]bool{}
		for _, n := range got {
			seen[n] = true
		}
		for n := range uint64(100) {
			if !seen[n] {
				t.Fatalf("signer %s: nonce %d missing from the batch's 100", signer, n)
			}
		}
	}
	again := s.batch(t, creates)
	if again.status != http.StatusOK || again.body.Replayed != 200 || again.body.Created != 0 {
		t.Fatalf("the same batch again: %d, %d replayed, %d created", again.status, again.body.Replayed, again.body.Created)
	}
	for i := range again.body.Results {
		if again.body.Results[i].Response.Tx.TxID != first.body.Results[i].Response.Tx.TxID {
			t.Fatalf("replay %d answers another transaction", i)
		}
	}
	if n := rows("bulk-"); n != 200 {
		t.Fatalf("%d rows for the 200 creates sent twice", n)
	}

	bad := func(prefix string) []map[string]any {
		var out []map[string]any
		for i := range 5 {
			out = append(out, transfer(i%2, fmt.Sprintf("%s-%d", prefix, i)))
		}
		return out
	}
	tooMany := make([]map[string]any, 1001)
	for i := range tooMany {
		tooMany[i] = transfer(0, fmt.Sprintf("many-%d", i))
	}
	duplicated := bad("dup")
	duplicated[3]["requestId"] = "dup-1"
	duplicated[3]["signer"] = devAddress(t, 1) // the same signer as creates[1]
	sameIDOtherSigner := bad("other")
	sameIDOtherSigner[2]["requestId"] = "other-1" // creates[1] is signer 1, this one signer 0: both proceed
	oneInvalid := bad("invalid")
	oneInvalid[2]["to"] = "0x1234"
	oneUnfunded := bad("unfunded")
	oneUnfunded[4]["signer"] = "0x0000000000000000000000000000000000000001" // no key for it
	withNUL := bad("nul")
	withNUL[1]["requestId"] = "nul-\x001" // a NUL character: no text column can hold it
	lowered := bad("case")
	lowered[3]["signer"], lowered[3]["requestId"] = strings.ToLower(devAddress(t, 1)), "case-1" // signer 1 in lower case repeats creates[1]

	for _, tc := range []struct {
		name       string
		creates    []map[string]any
		wantStatus int
		wantReason string         // the batch's refusal
		refused    map[int]string // per create: the reason it is refused for
		field      map[int]string // and the field it names
		prefix     string         // the requestIds' prefix, to count the rows written
		wantRows   int64
	}{
		{name: "1,001 creates", creates: tooMany, wantStatus: 400, wantReason: "INVALID_ARGUMENT", prefix: "many-", wantRows: 0},
		{name: "no creates", creates: []map[string]any{}, wantStatus: 400, wantReason: "INVALID_ARGUMENT", prefix: "none-", wantRows: 0},
		{name: "a requestId twice for one signer", creates: duplicated, wantStatus: 200, refused: map[int]string{3: "INVALID_ARGUMENT"},
			field: map[int]string{3: "creates[3].requestId"}, prefix: "dup-", wantRows: 4},
		{name: "the same requestId for two signers", creates: sameIDOtherSigner, wantStatus: 200, prefix: "other-", wantRows: 5},
		{name: "a signer's address in another case", creates: lowered, wantStatus: 200, refused: map[int]string{3: "INVALID_ARGUMENT"}, prefix: "case-", wantRows: 4},
		{name: "one invalid create among valid ones", creates: oneInvalid, wantStatus: 200, refused: map[int]string{2: "INVALID_ARGUMENT"},
			field: map[int]string{2: "to"}, prefix: "invalid-", wantRows: 4},
		{name: "one create with a NUL character in its requestId", creates: withNUL, wantStatus: 200, refused: map[int]string{1: "INVALID_ARGUMENT"},
			field: map[int]string{1: "requestId"}, prefix: "nul-", wantRows: 4},
		{name: "one create for a signer without a key", creates: oneUnfunded, wantStatus: 200, refused: map[int]string{4: "UNKNOWN_SIGNER"}, prefix: "unfunded-", wantRows: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := s.batch(t, tc.creates)
			if a.status != tc.wantStatus {
				t.Fatalf("status %d, want %d: %.300s", a.status, tc.wantStatus, a.raw)
			}
			if tc.wantReason != "" {
				if a.body.Reason != tc.wantReason || !strings.Contains(a.raw, "creates") {
					t.Fatalf("refusal %s, want %s naming creates: %s", a.body.Reason, tc.wantReason, a.raw)
				}
			} else {
				if len(a.body.Results) != len(tc.creates) {
					t.Fatalf("%d results for %d creates", len(a.body.Results), len(tc.creates))
				}
				for i, r := range a.body.Results {
					want, refused := tc.refused[i]
					switch {
					case refused && (r.Error == nil || r.Error.Reason != want):
						t.Fatalf("create %d: %+v, want refused %s", i, r, want)
					case refused && tc.field[i] != "" && r.Error.Metadata["field"] != tc.field[i]:
						t.Fatalf("create %d refused naming %q, want %q: %s", i, r.Error.Metadata["field"], tc.field[i], r.Error.Message)
					case !refused && (r.Response == nil || !r.Response.Created):
						t.Fatalf("create %d: %+v, want created", i, r)
					}
				}
				if a.body.Refused != len(tc.refused) || a.body.Created != len(tc.creates)-len(tc.refused) {
					t.Fatalf("counts: %d created, %d refused", a.body.Created, a.body.Refused)
				}
			}
			if n := rows(tc.prefix); n != tc.wantRows {
				t.Fatalf("%d rows written, want %d", n, tc.wantRows)
			}
		})
	}

	// Malformed or oversized bodies: refused whole, nothing written.
	for _, tc := range []struct {
		name, body, reason string
	}{
		{"not JSON", `{"creates": [`, "INVALID_ARGUMENT"},
		{"creates not a list", `{"creates": {"signer": "x"}}`, "INVALID_ARGUMENT"},
		{"an unknown field", `{"creates": [], "extra": 1}`, "INVALID_ARGUMENT"},
		{"over maxBatchBodyBytes", `{"creates": [{"signer": "` + strings.Repeat("a", 9<<20) + `"}]}`, "REQUEST_TOO_LARGE"},
	} {
		a := s.do(t, http.MethodPost, "/api/v1/tx:batch", []byte(tc.body))
		if a.status != http.StatusBadRequest || a.reason() != tc.reason {
			t.Fatalf("%s: %d %s, want 400 %s", tc.name, a.status, a.reason(), tc.reason)
		}
	}

	// gRPC: the same answers.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.grpc.CreateTxBatch(ctx, &v1.CreateTxBatchRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("an empty batch over gRPC: %v, want InvalidArgument", err)
	}
	resp, err := s.grpc.CreateTxBatch(ctx, &v1.CreateTxBatchRequest{Creates: []*v1.CreateTxRequest{
		{Signer: devAddress(t, 0), To: devAddress(t, 5), Value: "1", GasLimit: 21000, RequestId: "grpc-0"},
		{Signer: devAddress(t, 0), To: "0x12", Value: "1", GasLimit: 21000, RequestId: "grpc-1"},
		{Signer: devAddress(t, 0), To: devAddress(t, 5), Value: "1", GasLimit: 21000, RequestId: "bulk-000"},
	}})
	if err != nil || resp.GetCreated() != 1 || resp.GetRefused() != 1 || resp.GetReplayed() != 1 || resp.GetResults()[1].GetError().GetReason() != "INVALID_ARGUMENT" ||
		resp.GetResults()[2].GetResponse().GetTx().GetTxId() != first.body.Results[0].Response.Tx.TxID {
		t.Fatalf("a mixed batch over gRPC: %v %v", resp, err)
	}
}
