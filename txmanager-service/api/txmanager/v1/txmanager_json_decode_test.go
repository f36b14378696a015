package v1

import (
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

const fastSigner = "0x71C7656EC7ab88b098defB751B7401B5f6d8976F"

// createBodies are create bodies the fast path takes (fast: true) or leaves to protojson.
var createBodies = []struct {
	name string
	body string
	fast bool
}{
	{"empty object", `{}`, true},
	{"what the bench and the SDK send", `{"signer":"` + fastSigner + `","requestId":"bench-1-42","to":"` + fastSigner + `","value":"1","gasLimit":"21000"}`, true},
	{"every field, JSON names", `{"signer":"a","requestId":"b","to":"c","value":"0x10","data":"0x6000","gasLimit":21000,"maxFeePerGas":"7","maxPriorityFeePerGas":"1","chainId":"1337"}`, true},
	{"every field, proto names", `{"signer":"a","request_id":"b","to":"c","value":"1","data":"0x","gas_limit":"0","max_fee_per_gas":"7","max_priority_fee_per_gas":"1","chain_id":1}`, true},
	{"whitespace everywhere", " \n{ \"signer\" :\t\"a\" ,\r\n \"gasLimit\" : 5 } \n", true},
	{"largest uint64", `{"gasLimit":18446744073709551615}`, true},
	{"empty strings", `{"signer":"","to":""}`, true},
	{"uint64 overflow", `{"gasLimit":18446744073709551616}`, false},
	{"leading zero", `{"gasLimit":021000}`, false},
	{"quoted leading zero", `{"gasLimit":"021000"}`, false},
	{"exponent", `{"gas_limit":2.1e4}`, false},
	{"fraction", `{"gasLimit":21000.5}`, false},
	{"negative", `{"gasLimit":-1}`, false},
	{"unterminated quoted number", `{"gasLimit":"21000}`, false},
	{"escape in a value", `{"signer":"\u0061"}`, false},
	{"escape in a key", `{"sig\u006eer":"a"}`, false},
	{"non-ASCII", `{"requestId":"caf` + "\xc3\xa9" + `"}`, false},
	{"control character", "{\"requestId\":\"a\tb\"}", false},
	{"null", `{"signer":null}`, false},
	{"number for a string", `{"signer":1}`, false},
	{"string field twice", `{"to":"x","to":"y"}`, false},
	{"both names of a field", `{"requestId":"x","request_id":"y"}`, false},
	{"unknown field", `{"gasLimt":21000}`, false},
	{"trailing comma", `{"signer":"a",}`, false},
	{"missing comma", `{"signer":"a" "to":"b"}`, false},
	{"trailing text", `{"signer":"a"} x`, false},
	{"two objects", `{}{}`, false},
	{"unterminated", `{"signer":"a"`, false},
	{"array", `[]`, false},
	{"empty body", ``, false},
}

// The fast path takes the plain shapes and gives the message protojson gives; it leaves
// every other body alone, and protojson's verdict (a message or an error) stands for it.
func TestDecodeCreateTxFast(t *testing.T) {
	t.Parallel()
	for _, tc := range createBodies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var fast CreateTxRequest
			if got := fast.decodeJSONFast([]byte(tc.body)); got != tc.fast {
				t.Fatalf("fast path took it: %v, want %v", got, tc.fast)
			}
			if tc.fast {
				checkSameAsProtojson(t, []byte(tc.body), &fast)
			}
		})
	}
}

// FuzzDecodeCreateTxFast holds the fast path to protojson: whatever body it takes, protojson
// takes too and decodes to the same message.
func FuzzDecodeCreateTxFast(f *testing.F) {
	for _, tc := range createBodies {
		f.Add([]byte(tc.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast CreateTxRequest
		if fast.decodeJSONFast(body) {
			checkSameAsProtojson(t, body, &fast)
		}
	})
}

func checkSameAsProtojson(t *testing.T, body []byte, fast *CreateTxRequest) {
	t.Helper()
	var want CreateTxRequest
	if err := strictJSON.Unmarshal(body, &want); err != nil {
		t.Fatalf("the fast path took %q, which protojson refuses: %v", body, err)
	}
	if !proto.Equal(fast, &want) {
		t.Fatalf("the fast path read %q as\n %v\nprotojson as\n %v", body, fast, &want)
	}
}

// BenchmarkDecodeCreateTx compares the fast path with protojson on the body the bench's
// clients send.
func BenchmarkDecodeCreateTx(b *testing.B) {
	body := []byte(createBodies[1].body)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var msg CreateTxRequest
			if !msg.decodeJSONFast(body) {
				b.Fatal("the fast path left the bench's body")
			}
		}
	})
	b.Run("protojson", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var msg CreateTxRequest
			if err := protojson.Unmarshal(body, &msg); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A batch's fast path takes a list of plain creates and gives what protojson gives; any
// other shape is left to protojson.
func TestDecodeCreateTxBatchFast(t *testing.T) {
	t.Parallel()
	one := `{"signer":"0x71C7656EC7ab88b098defB751B7401B5f6d8976F","to":"a}b","value":"1","gasLimit":21000,"requestId":"r-1"}`
	for _, tc := range []struct {
		name, body string
		fast       bool
	}{
		{"one create", `{"creates":[` + one + `]}`, true},
		{"two creates, spaces", "{ \"creates\" : [ " + one + " ,\n" + one + " ] }", true},
		{"none", `{"creates":[]}`, true},
		{"an escape in a create", `{"creates":[{"signer":"a\"b"}]}`, false},
		{"a nested object", `{"creates":[{"signer":{"a":1}}]}`, false},
		{"another key", `{"intents":[]}`, false},
		{"a second key", `{"creates":[],"x":1}`, false},
		{"a create the single fast path refuses", `{"creates":[{"gasLimt":1}]}`, false},
		{"trailing text", `{"creates":[]} x`, false},
		{"unterminated", `{"creates":[` + one, false},
		{"missing comma", `{"creates":[` + one + one + `]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fast CreateTxBatchRequest
			if got := fast.decodeJSONFast([]byte(tc.body)); got != tc.fast {
				t.Fatalf("fast path took it: %v, want %v", got, tc.fast)
			}
			if !tc.fast {
				return
			}
			var want CreateTxBatchRequest
			if err := strictJSON.Unmarshal([]byte(tc.body), &want); err != nil {
				t.Fatalf("the fast path took %q, which protojson refuses: %v", tc.body, err)
			}
			if !proto.Equal(&fast, &want) {
				t.Fatalf("the fast path read\n %v\nprotojson\n %v", &fast, &want)
			}
		})
	}
}

// FuzzDecodeCreateTxBatchFast holds the batch's fast path to protojson.
func FuzzDecodeCreateTxBatchFast(f *testing.F) {
	f.Add([]byte(`{"creates":[{"signer":"a","gasLimit":1},{"to":"b"}]}`))
	f.Add([]byte(`{"creates":[]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast CreateTxBatchRequest
		if !fast.decodeJSONFast(body) {
			return
		}
		var want CreateTxBatchRequest
		if err := strictJSON.Unmarshal(body, &want); err != nil {
			t.Fatalf("the fast path took %q, which protojson refuses: %v", body, err)
		}
		if !proto.Equal(&fast, &want) {
			t.Fatalf("the fast path read %q as\n %v\nprotojson as\n %v", body, &fast, &want)
		}
	})
}
