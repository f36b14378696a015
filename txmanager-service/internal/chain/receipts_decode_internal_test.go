package chain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// batchAnswer wraps block results as a node's batch answer, with ids in the given order.
func batchAnswer(results ...string) string {
	elems := make([]string, len(results))
	for i, r := range results {
		elems[i] = `{"jsonrpc":"2.0","id":` + string(rune('0'+i)) + `,"result":` + r + `}`
	}
	return "[" + strings.Join(elems, ",") + "]"
}

const opReceipt = `{"blockHash":"0x4d0d6e3d0e2c3f8b1d6a0b6cf2cfd2f6e0d1a6b1f0d2b4e6f3b4c1a2d3e4f5a6","blockNumber":"0x1b4","contractAddress":null,` +
	`"cumulativeGasUsed":"0xa410","effectiveGasPrice":"0x3b9aca01","from":"0x71c7656ec7ab88b098defb751b7401b5f6d8976f","gasUsed":"0x5208",` +
	`"l1BaseFeeScalar":"0x558","l1BlobBaseFee":"0x1","l1Fee":"0x1c6bf52634000","l1GasPrice":"0x3","l1GasUsed":"0x640",` +
	`"logs":[{"address":"0x71c7656ec7ab88b098defb751b7401b5f6d8976f","topics":["0xddf252ad1be2c89b69c2b068fc378daa952ba7f163c4a11628f55a4df523b3ef"],"data":"0x","blockNumber":"0x1b4","logIndex":"0x0","removed":false}],` +
	`"logsBloom":"0x00","status":"0x1","to":null,"transactionHash":"0x5e1f0c9a8b7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f","transactionIndex":"0x1","type":"0x7e","depositNonce":12,"depositReceiptVersion":-1.5e+3}`

const creationReceipt = `{"blockHash":"0x4d0d6e3d0e2c3f8b1d6a0b6cf2cfd2f6e0d1a6b1f0d2b4e6f3b4c1a2d3e4f5a6","blockNumber":"0x1b4",` +
	`"contractAddress":"0x5fbdb2315678afecb367f032d93f642f64180aa3","gasUsed":"0x1d4c0","status":"0x0",` +
	`"transactionHash":"0x9e1f0c9a8b7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f","transactionIndex":"0x0"}`

// The answers nodes give are read without encoding/json, and read as encoding/json reads
// them.
func TestDecodeReceiptsFastReadsNodeAnswers(t *testing.T) {
	indented := func(s string) string {
		var out bytes.Buffer
		if err := json.Indent(&out, []byte(s), "", "\t"); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	tests := []struct {
		name, body string
		receipts   []int // receipts per answer
	}{
		{"geth's blocks of transfers", batchAnswer(string(gethBlockReceipts(100, 50)), string(gethBlockReceipts(101, 3))), []int{50, 3}},
		{"an OP-stack receipt with its L1 fee and logs", batchAnswer("[" + opReceipt + "]"), []int{1}},
		{"a contract creation that reverted", batchAnswer("[" + creationReceipt + "]"), []int{1}},
		{"an empty block and one not there yet", batchAnswer("[]", "null"), []int{0, 0}},
		{"answers reordered, string and null ids", `[{"id":1,"result":[]},{"id":"0","result":null,"error":null},{"id":null,"result":[]}]`, []int{0, 0, 0}},
		{"an empty batch", `[]`, nil},
		{"indented", indented(batchAnswer("["+opReceipt+","+creationReceipt+"]", "[]")), []int{2, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fast, ok := decodeReceiptsFast([]byte(tc.body))
			if !ok {
				t.Fatal("the fast path refused a node's answer")
			}
			var slow []receiptsAnswer
			if err := json.Unmarshal([]byte(tc.body), &slow); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast path read\n%+v\nencoding/json read\n%+v", fast, slow)
			}
			if len(fast) != len(tc.receipts) {
				t.Fatalf("%d answers, want %d", len(fast), len(tc.receipts))
			}
			for i, n := range tc.receipts {
				if len(fast[i].Result) != n {
					t.Errorf("answer %d: %d receipts, want %d", i, len(fast[i].Result), n)
				}
			}
		})
	}
	t.Run("fields", func(t *testing.T) {
		answers, ok := decodeReceiptsFast([]byte(batchAnswer("[" + opReceipt + "," + creationReceipt + "]")))
		if !ok {
			t.Fatal("refused")
		}
		op, creation := answers[0].Result[0], answers[0].Result[1]
		if op.L1Fee == nil || op.L1Fee.ToInt().String() != "500000000000000" || uint64(*op.Status) != 1 || op.ContractAddress != nil ||
			uint64(op.GasUsed) != 21000 || op.EffectiveGasPrice.ToInt().Uint64() != 1_000_000_001 || op.BlockNumber.ToInt().Uint64() != 436 {
			t.Errorf("OP-stack receipt read as %+v", op)
		}
		if creation.ContractAddress == nil || creation.ContractAddress.Hex() != "0x5FbDB2315678afecb367f032d93F642f64180aa3" ||
			uint64(*creation.Status) != 0 || creation.L1Fee != nil || creation.EffectiveGasPrice != nil {
			t.Errorf("creation receipt read as %+v", creation)
		}
	})
}

// The fast path knows every field of rpcReceipt and receiptsAnswer by its JSON name: a field
// added to either without it would be read by encoding/json and dropped by the fast path.
func TestDecodeReceiptsFastKnowsEveryField(t *testing.T) {
	for _, tc := range []struct {
		of    reflect.Type
		known []string
	}{{reflect.TypeFor[rpcReceipt](), receiptFields}, {reflect.TypeFor[receiptsAnswer](), answerFields}} {
		var tags []string
		for f := range tc.of.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			tags = append(tags, name)
		}
		slices.Sort(tags)
		known := slices.Sorted(slices.Values(tc.known))
		if !slices.Equal(tags, known) {
			t.Errorf("%s has the JSON fields %v, the fast path reads %v", tc.of.Name(), tags, known)
		}
	}
}

// Whatever the fast path does not read exactly as encoding/json would, it leaves to
// encoding/json.
func TestDecodeReceiptsFastLeavesTheUnusualToEncodingJSON(t *testing.T) {
	tests := []struct{ name, body string }{
		{"an error element", `[{"id":0,"error":{"code":-32000,"message":"header not found"}}]`},
		{"an error for the whole batch", `{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"invalid request"}}`},
		{"an escaped string", batchAnswer(`[{"status":"0x1","to":"\u0030x"}]`)},
		{"a field in another case", batchAnswer(`[{"Status":"0x1"}]`)},
		{"a key folding to a field", batchAnswer(`[{"ſtatus":"0x1"}]`)},
		{"a null receipt", batchAnswer(`[null]`)},
		{"a result given twice", `[{"id":0,"result":[{"status":"0x1"}],"result":[{"gasUsed":"0x1"}]}]`},
		{"a status that is not hex", batchAnswer(`[{"status":"0x01"}]`)},
		{"a number where a hex string belongs", batchAnswer(`[{"gasUsed":21000}]`)},
		{"a null where a value belongs", batchAnswer(`[{"transactionHash":null}]`)},
		{"a short hash", batchAnswer(`[{"transactionHash":"0x12"}]`)},
		{"trailing data", batchAnswer(`[]`) + ` x`},
		{"an unterminated answer", `[{"id":0,"result":[]}`},
		{"a leading zero", `[{"id":01,"result":[]}]`},
		{"a control character", "[{\"id\":0,\"note\":\"a\tb\",\"result\":[]}]"},
		{"nesting past the bound", `[{"id":0,"x":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `,"result":[]}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if answers, ok := decodeReceiptsFast([]byte(tc.body)); ok {
				t.Fatalf("the fast path read %+v", answers)
			}
		})
	}
}

// FuzzDecodeReceiptsFast: an answer the fast path reads, encoding/json reads too, to the same
// result.
func FuzzDecodeReceiptsFast(f *testing.F) {
	for _, seed := range []string{
		batchAnswer(string(gethBlockReceipts(7, 2))),
		batchAnswer("["+opReceipt+","+creationReceipt+"]", "[]", "null"),
		`[{"id":1,"result":[]},{"id":"0","result":null,"error":null},{"id":null,"result":[]}]`,
		`[]`, `[{}]`, `[{"result":[{}]}]`, `[{"id":[1,{"a":true}],"result":[{"x":false,"y":-0.5e-3}]}]`,
		`[{"id":0,"result":[{"status":"0x1","status":null,"blockHash":"0x4d0d6e3d0e2c3f8b1d6a0b6cf2cfd2f6e0d1a6b1f0d2b4e6f3b4c1a2d3e4f5a6"}]}]`,
		`[{"id":0,"error":{"code":1}}]`, `[{"Result":[]}]`, `[{"id":0,"result":[null]}]`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for from := range min(len(body), 9) {
			want := len(body[from:])
			for i, c := range body[from:] {
				if c == '"' || c == '\\' || c < 0x20 {
					want = i
					break
				}
			}
			if got := stringEnd(body[from:]); got != want {
				t.Fatalf("stringEnd(%q) = %d, want %d", body[from:], got, want)
			}
		}
		fast, ok := decodeReceiptsFast(body)
		if !ok {
			return
		}
		var slow []receiptsAnswer
		if err := json.Unmarshal(body, &slow); err != nil {
			t.Fatalf("the fast path read %q, which encoding/json refuses: %v", body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast path read\n%+v\nencoding/json read\n%+v", body, fast, slow)
		}
	})
}
