package v1

import (
	"bytes"
	"encoding/json"
	"errors"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// FuzzDecodeJSONBody feeds arbitrary bytes to the create decoder as an HTTP body. Whatever
// arrives, the answer is a decoded message that survives a protojson round trip, or a 400
// with one of the two reasons the decoder owns; a body over the limit is always
// REQUEST_TOO_LARGE and one within it never is.
func FuzzDecodeJSONBody(f *testing.F) {
	const signer = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"
	for _, seed := range []string{
		``,
		`{}`,
		`{"signer":"` + signer + `","to":"` + signer + `","value":"12345","gasLimit":21000}`,
		`{"signer":"` + signer + `","requestId":"invoice-42","data":"0x6000","gasLimit":"21000","maxFeePerGas":"0x10","maxPriorityFeePerGas":"1"}`,
		`{"signer":"` + signer + `","request_id":"snake","gas_limit":2.1e4}`,
		`{"signer":"` + signer + `","to":"x","to":"y"}`,
		`{"signer":1}`,
		`{"signer":null,"value":true}`,
		`{"gasLimit":1e30}`,
		`{"gasLimit":-1}`,
		`{"gasLimit":21000.5}`,
		`{"gasLimt":21000}`,
		`{"signer":"\u0000\u202e🙂"}`,
		"{\"signer\":\"\xff\xfe\"}",
		`[1,2,3]`,
		`{"signer":"a"} trailing`,
		`null`,
		strings.Repeat("[", 2000),
		`{"to":` + strings.Repeat(`{"a":`, 200) + `1` + strings.Repeat(`}`, 200) + `}`,
	} {
		f.Add([]byte(seed), uint16(512), false)
		f.Add([]byte(seed), uint16(len(seed)), true)
		if len(seed) > 0 {
			f.Add([]byte(seed), uint16(len(seed)-1), true)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, limit uint16, limitAsServer bool) {
		maxBytes := int64(limit)
		r := httptest.NewRequest(nethttp.MethodPost, "/api/v1/tx", bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		if limitAsServer {
			// As the HTTP server's body filter does: reading past the cap fails.
			r.Body = nethttp.MaxBytesReader(httptest.NewRecorder(), r.Body, maxBytes)
		}
		var msg CreateTxRequest
		err := DecodeJSONBody(r, maxBytes, &msg)
		tooLarge := int64(len(body)) > maxBytes
		if err != nil {
			var kerr *kerrors.Error
			if !errors.As(err, &kerr) {
				t.Fatalf("error %T %v is not a Kratos error", err, err)
			}
			if kerr.Code != nethttp.StatusBadRequest {
				t.Fatalf("code %d, want 400: %v", kerr.Code, kerr)
			}
			switch kerr.Reason {
			case ErrorReason_REQUEST_TOO_LARGE.String():
				if !tooLarge {
					t.Fatalf("a %d-byte body under the %d-byte limit was called too large", len(body), maxBytes)
				}
			case ErrorReason_INVALID_ARGUMENT.String():
				if tooLarge {
					t.Fatalf("a %d-byte body over the %d-byte limit got %v, want REQUEST_TOO_LARGE", len(body), maxBytes, kerr)
				}
				if kerr.Metadata["field"] == "" {
					t.Fatalf("INVALID_ARGUMENT without metadata.field: %v", kerr)
				}
			default:
				t.Fatalf("reason %q, want INVALID_ARGUMENT or REQUEST_TOO_LARGE", kerr.Reason)
			}
			if kerr.Message == "" {
				t.Fatalf("error without a message: %v", kerr)
			}
			return
		}
		if tooLarge {
			t.Fatalf("a %d-byte body over the %d-byte limit was accepted", len(body), maxBytes)
		}
		// Not json.Valid(body): protojson takes an exponent without digits ({"gasLimit":10e}
		// decodes as 10), which strict JSON refuses. It is an object, though.
		if trimmed := bytes.TrimLeft(body, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("accepted a body that is not a JSON object: %q", body)
		}
		encoded, err := protojson.Marshal(&msg)
		if err != nil {
			t.Fatalf("accepted message does not re-marshal: %v (body %q)", err, body)
		}
		var again CreateTxRequest
		if err := strictJSON.Unmarshal(encoded, &again); err != nil {
			t.Fatalf("re-marshalled %s does not decode: %v", encoded, err)
		}
		if !proto.Equal(&msg, &again) {
			t.Fatalf("round trip differs:\n got %v\nwant %v", &again, &msg)
		}
	})
}

// protojson refuses timestamps outside years 1..9999; the service writes none (they come
// from time.Time of this era), so fuzzed seconds are folded into that range.
const (
	minTimestampSeconds = -62135596800
	maxTimestampSeconds = 253402300799
)

func fuzzTimestamp(present bool, seconds int64, nanos int32) *timestamppb.Timestamp {
	if !present {
		return nil
	}
	span := int64(maxTimestampSeconds - minTimestampSeconds + 1)
	s := seconds % span
	if s < 0 {
		s += span
	}
	n := nanos % int32(time.Second)
	if n < 0 {
		n = -n
	}
	return &timestamppb.Timestamp{Seconds: minTimestampSeconds + s, Nanos: n}
}

// FuzzAppendJSON checks the hand-written encoder against protojson for arbitrary field
// values: its output is valid JSON, protojson decodes it to the same message (strings with
// invalid UTF-8 compared as the encoder repairs them) and it names exactly the fields
// protojson emits with EmitUnpopulated.
func FuzzAppendJSON(f *testing.F) {
	f.Add("01a200aa-de74-77dd-9841-198a19e3eb72", "0x71C7656EC7ab88b098defB751B7401B5f6d8976F", "invoice-42", "CONFIRMED", "MINED",
		"0x0000000000000000000000000000000000000001", "12345", "0x6000", "0xabc", "", uint64(7), uint64(21000), uint32(2),
		true, "0xdef", "0x123", uint64(1), uint64(99), uint64(21000),
		true, int64(1_700_000_000), int32(123_456_000), true, int64(1_700_000_001), int32(0), false, int64(0), int32(0), true)
	f.Add("\x00\x1f\"\\/\n\t\r\b\f<>&'", "é中🙂\u2028\u2029", "\xff\xfe\xed\xa0\x80", "\x7f", "\ufffd", "a\xc3", "", "", "", "\\u0000",
		^uint64(0), uint64(0), ^uint32(0), true, "\xe2\x80", "\xf0\x9f\x99", ^uint64(0), ^uint64(0), uint64(0),
		true, int64(-1<<63), int32(-1), true, int64(1<<63-1), int32(999_999_999), true, int64(0), int32(1), false)
	f.Add("", "", "", "", "", "", "", "", "", "", uint64(0), uint64(0), uint32(0),
		false, "", "", uint64(0), uint64(0), uint64(0), false, int64(0), int32(0), false, int64(0), int32(0), false, int64(0), int32(0), true)
	f.Fuzz(func(t *testing.T, txID, signer, requestID, state, subState, to, value, data, txHash, lastError string,
		nonce, gasLimit uint64, attempts uint32,
		hasReceipt bool, receiptHash, blockHash string, status, blockNumber, gasUsed uint64,
		hasCreated bool, createdS int64, createdN int32, hasUpdated bool, updatedS int64, updatedN int32,
		hasConfirmed bool, confirmedS int64, confirmedN int32, created bool) {
		msg := &CreateTxResponse{Created: created, Tx: &Tx{
			TxId: txID, Signer: signer, RequestId: requestID, Nonce: nonce, State: state, SubState: subState, To: to,
			Value: value, Data: data, GasLimit: gasLimit, TxHash: txHash, SubmitAttempts: attempts, LastError: lastError,
			CreatedAt:   fuzzTimestamp(hasCreated, createdS, createdN),
			UpdatedAt:   fuzzTimestamp(hasUpdated, updatedS, updatedN),
			ConfirmedAt: fuzzTimestamp(hasConfirmed, confirmedS, confirmedN),
		}}
		if hasReceipt {
			msg.Tx.Receipt = &Receipt{TxHash: receiptHash, Status: status, BlockNumber: blockNumber, BlockHash: blockHash, GasUsed: gasUsed}
		}
		checkAppendJSON(t, msg)
		// The bare Tx (GET /api/v1/tx/{id}) goes through the same encoder.
		fast := msg.Tx.AppendJSON(nil)
		var tx Tx
		if err := protojson.Unmarshal(fast, &tx); err != nil {
			t.Fatalf("protojson rejects %s: %v", fast, err)
		}
		if want := repairedUTF8(msg).Tx; !proto.Equal(want, &tx) {
			t.Fatalf("Tx round trip differs:\n got %v\nwant %v\njson %s", &tx, want, fast)
		}
	})
}

func checkAppendJSON(t *testing.T, msg *CreateTxResponse) {
	t.Helper()
	fast := msg.AppendJSON(nil)
	if !json.Valid(fast) {
		t.Fatalf("invalid JSON: %q", fast)
	}
	var decoded CreateTxResponse
	if err := protojson.Unmarshal(fast, &decoded); err != nil {
		t.Fatalf("protojson rejects %s: %v", fast, err)
	}
	want := repairedUTF8(msg)
	if !proto.Equal(want, &decoded) {
		t.Fatalf("round trip differs:\n got %v\nwant %v\njson %s", &decoded, want, fast)
	}
	reference, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(want)
	if err != nil {
		t.Fatalf("protojson cannot marshal %v: %v", want, err)
	}
	if got, want := keysOf(t, fast), keysOf(t, reference); got != want {
		t.Fatalf("fields differ:\n got %s\nwant %s", got, want)
	}
}

// repairedUTF8 is msg with every string, receipt included, repaired as the encoder repairs
// invalid UTF-8 (each bad byte becomes U+FFFD); protojson refuses invalid UTF-8 outright.
func repairedUTF8(msg *CreateTxResponse) *CreateTxResponse {
	out := normalised(msg)
	if r := out.GetTx().GetReceipt(); r != nil {
		r.TxHash, r.BlockHash = toValidUTF8(r.TxHash), toValidUTF8(r.BlockHash)
	}
	return out
}
