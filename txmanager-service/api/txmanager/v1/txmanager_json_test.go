package v1

import (
	"encoding/json"
	"math/rand/v2"
	"sort"
	"testing"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

func randomString(r *rand.Rand) string {
	alphabet := []rune("abcXYZ019 \"\\/\n\t\r\b\f\x00\x1f<>&'é中🙂\u2028")
	n := r.IntN(12)
	out := make([]rune, n)
	for i := range out {
		out[i] = alphabet[r.IntN(len(alphabet))]
	}
	return string(out)
}

func randomTimestamp(r *rand.Rand) *timestamppb.Timestamp {
	if r.IntN(4) == 0 {
		return nil
	}
	nanos := []int64{0, 1, 120_000_000, 123_456_000, 123_456_789, 999_999_999}[r.IntN(6)]
	return timestamppb.New(time.Unix(r.Int64N(4_000_000_000), nanos))
}

func randomTx(r *rand.Rand) *Tx {
	tx := &Tx{
		TxId: randomString(r), Signer: randomString(r), RequestId: randomString(r), Nonce: r.Uint64(),
		State: randomString(r), SubState: randomString(r), To: randomString(r), Value: randomString(r),
		Data: randomString(r), GasLimit: r.Uint64(), TxHash: randomString(r), SubmitAttempts: r.Uint32(),
		LastError: randomString(r), CreatedAt: randomTimestamp(r), UpdatedAt: randomTimestamp(r), ConfirmedAt: randomTimestamp(r),
	}
	if r.IntN(2) == 0 {
		tx.Receipt = &Receipt{TxHash: randomString(r), Status: r.Uint64(), BlockNumber: r.Uint64(), BlockHash: randomString(r), GasUsed: r.Uint64()}
	}
	return tx
}

// The hand-written encoder must say what protojson says: protojson decodes it to the same
// message, and it names exactly the fields protojson emits with EmitUnpopulated.
func TestAppendJSONMatchesProtojson(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		msg := &CreateTxResponse{Tx: randomTx(r), Created: r.IntN(2) == 0}
		if i%50 == 0 {
			msg.Tx = nil
		}
		fast := msg.AppendJSON(nil)
		if !json.Valid(fast) {
			t.Fatalf("invalid JSON: %s", fast)
		}
		var decoded CreateTxResponse
		if err := protojson.Unmarshal(fast, &decoded); err != nil {
			t.Fatalf("protojson rejects %s: %v", fast, err)
		}
		if !proto.Equal(normalised(msg), &decoded) {
			t.Fatalf("round trip differs:\n got %v\nwant %v\njson %s", &decoded, msg, fast)
		}
		reference, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := keysOf(t, fast), keysOf(t, reference); got != want {
			t.Fatalf("fields differ:\n got %s\nwant %s", got, want)
		}
	}
}

// A batch's answer, written by hand, says what protojson says of it.
func TestBatchAppendJSONMatchesProtojson(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for range 300 {
		msg := &CreateTxBatchResponse{Created: r.Uint32N(1000), Replayed: r.Uint32N(1000), Refused: r.Uint32N(1000)}
		for range r.IntN(20) {
			if r.IntN(3) == 0 {
				e := &CreateTxError{HttpStatus: int32(400 + r.IntN(200)), Reason: "INVALID_ARGUMENT", Message: "to: not \"an\" address\n"}
				if r.IntN(2) == 0 {
					e.Metadata = map[string]string{"field": "creates[3].requestId", "retry_after_seconds": "2"}
				}
				msg.Results = append(msg.Results, &CreateTxResult{Result: &CreateTxResult_Error{Error: e}})
				continue
			}
			msg.Results = append(msg.Results, &CreateTxResult{Result: &CreateTxResult_Response{Response: normalised(&CreateTxResponse{Tx: randomTx(r), Created: r.IntN(2) == 0})}})
		}
		fast := msg.AppendJSON(nil)
		var decoded CreateTxBatchResponse
		if err := protojson.Unmarshal(fast, &decoded); err != nil {
			t.Fatalf("protojson rejects %s: %v", fast, err)
		}
		if !proto.Equal(msg, &decoded) {
			t.Fatalf("round trip differs:\n got %v\nwant %v", &decoded, msg)
		}
		reference, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := keysOf(t, fast), keysOf(t, reference); got != want {
			t.Fatalf("fields differ:\n got %s\nwant %s", got, want)
		}
	}
}

// normalised replaces invalid UTF-8 the way the encoder does (protojson refuses it).
func normalised(msg *CreateTxResponse) *CreateTxResponse {
	out := proto.Clone(msg).(*CreateTxResponse)
	if tx := out.GetTx(); tx != nil {
		for _, s := range []*string{&tx.TxId, &tx.Signer, &tx.RequestId, &tx.State, &tx.SubState, &tx.To, &tx.Value, &tx.Data, &tx.TxHash, &tx.LastError} {
			*s = toValidUTF8(*s)
		}
	}
	return out
}

func toValidUTF8(s string) string {
	if utf8.ValidString(s) {
		return s
	}
	var b []rune
	for _, r := range s {
		b = append(b, r)
	}
	return string(b)
}

func keysOf(t *testing.T, doc []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(doc, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if obj, ok := v.(map[string]any); ok {
			for k, child := range obj {
				keys = append(keys, prefix+k)
				walk(prefix+k+".", child)
			}
		}
	}
	walk("", m)
	sort.Strings(keys)
	out, _ := json.Marshal(keys)
	return string(out)
}

func BenchmarkCreateTxResponseJSON(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 4))
	msg := &CreateTxResponse{Tx: randomTx(r), Created: true}
	b.Run("protojson", func(b *testing.B) {
		for b.Loop() {
			_, _ = protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(msg)
		}
	})
	b.Run("AppendJSON", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = msg.AppendJSON(buf[:0])
		}
	})
}
