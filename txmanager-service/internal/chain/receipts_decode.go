package chain

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/bits"
	"strings"
)

// decodeReceiptsFast reads a batch answer to eth_getBlockReceipts in the shape nodes give
// it, without encoding/json: reflection-driven decoding scans the answer twice (checking it,
// then decoding it) and spends most of its time skipping what the service does not read (a
// transfer's receipt is about 700 bytes, of which the logs bloom alone is 514). Here the
// answer is scanned once; each field the service reads goes to the same UnmarshalJSON
// encoding/json would call, and everything else is only stepped over.
//
// It handles a strict subset of JSON: strings without escapes or control characters,
// plain object keys, no error element, no null receipt. For anything else (or anything a
// field's UnmarshalJSON refuses) ok is false and the caller decodes with encoding/json, so
// an unusual answer is read, or refused, exactly as before. For every answer it accepts,
// the result is the one encoding/json gives (FuzzDecodeReceiptsFast).
func decodeReceiptsFast(body []byte) (answers []receiptsAnswer, ok bool) {
	s := fastScanner{b: body}
	if !s.consume('[') {
		return nil, false
	}
	answers = []receiptsAnswer{}
	// On a refusal nothing is returned: encoding/json would decode into a slice it is given,
	// field by field over what is there.
	end := func() ([]receiptsAnswer, bool) {
		if !s.atEnd() {
			return nil, false
		}
		return answers, true
	}
	if s.consume(']') {
		return end()
	}
	for {
		var a receiptsAnswer
		if !s.answer(&a) {
			return nil, false
		}
		answers = append(answers, a)
		if s.consume(']') {
			return end()
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// fastScanner steps through a JSON text; every method reports false for anything outside
// the subset decodeReceiptsFast reads.
type fastScanner struct {
	b []byte
	i int
}

// maxSkipDepth bounds the nesting stepped over; deeper values go to encoding/json.
const maxSkipDepth = 32

func (s *fastScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// consume steps over c (after any white space) when it comes next.
func (s *fastScanner) consume(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *fastScanner) atEnd() bool {
	s.space()
	return s.i == len(s.b)
}

// null steps over a null literal when it comes next.
func (s *fastScanner) null() bool {
	s.space()
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// quoted steps over a string and returns it with its quotes: no escapes and no control
// characters, so its bytes are its value.
func (s *fastScanner) quoted() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i
	end := s.i + 1 + stringEnd(s.b[s.i+1:])
	if end >= len(s.b) || s.b[end] != '"' {
		return nil, false // an escape, a control character, or no end
	}
	s.i = end + 1
	return s.b[start:s.i], true
}

// stringEnd is the index of the first quote, backslash or control character in b (len(b)
// when there is none). Eight bytes at a time: the long hex strings of a receipt (the logs
// bloom is 514 characters) are most of an answer's bytes.
func stringEnd(b []byte) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	i := 0
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		quote, backslash := x^(ones*'"'), x^(ones*'\\')
		// A byte's high bit is set in found when that byte is zero in quote or backslash,
		// or below 0x20 in x (exact for the lowest such byte, which is all this needs).
		found := ((quote - ones) &^ quote) | ((backslash - ones) &^ backslash) | ((x - ones*0x20) &^ x)
		if found &= highs; found != 0 {
			return i + bits.TrailingZeros64(found)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

// key reads an object key and the colon after it. A key encoding/json would match to a
// field of another spelling (it folds case, Unicode's too) is refused: only exact names
// and plainly unrelated ASCII keys pass.
func (s *fastScanner) key(names ...string) (string, bool) {
	raw, ok := s.quoted()
	if !ok || !s.consume(':') {
		return "", false
	}
	k := raw[1 : len(raw)-1]
	for _, c := range k {
		if c >= 0x80 {
			return "", false
		}
	}
	for _, name := range names {
		if len(k) != len(name) {
			continue
		}
		if string(k) == name {
			return name, true
		}
		if strings.EqualFold(string(k), name) {
			return "", false
		}
	}
	return "", true
}

// object steps over an object whose members field reads; field gets each key (as matched
// against names, "" for another) and reads or skips its value.
func (s *fastScanner) object(names []string, field func(name string) bool) bool {
	if !s.consume('{') {
		return false
	}
	if s.consume('}') {
		return true
	}
	for {
		name, ok := s.key(names...)
		if !ok || !field(name) {
			return false
		}
		if s.consume('}') {
			return true
		}
		if !s.consume(',') {
			return false
		}
	}
}

// skip steps over one value of the subset and returns its bytes.
func (s *fastScanner) skip(depth int) ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || depth > maxSkipDepth {
		return nil, false
	}
	start := s.i
	switch c := s.b[s.i]; {
	case c == '"':
		if _, ok := s.quoted(); !ok {
			return nil, false
		}
	case c == '{':
		if !s.object(nil, func(string) bool { _, ok := s.skip(depth + 1); return ok }) {
			return nil, false
		}
	case c == '[':
		s.i++
		if !s.consume(']') {
			for {
				if _, ok := s.skip(depth + 1); !ok {
					return nil, false
				}
				if s.consume(']') {
					break
				}
				if !s.consume(',') {
					return nil, false
				}
			}
		}
	case c == '-' || (c >= '0' && c <= '9'):
		if !s.number() {
			return nil, false
		}
	default:
		for _, literal := range []string{"true", "false", "null"} {
			if bytes.HasPrefix(s.b[s.i:], []byte(literal)) {
				s.i += len(literal)
				return s.b[start:s.i], true
			}
		}
		return nil, false
	}
	return s.b[start:s.i], true
}

// number steps over a number as JSON's grammar has it.
func (s *fastScanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
	} else if digits() == 0 {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

var answerFields = []string{"id", "error", "result"}

// answer reads one element of the batch answer: its id and receipts. An element with an
// error object is left to encoding/json (a rare answer, read as the client reads it).
func (s *fastScanner) answer(a *receiptsAnswer) bool {
	results := 0
	return s.object(answerFields, func(name string) bool {
		switch name {
		case "id":
			raw, ok := s.skip(0)
			a.ID = append(a.ID[:0], raw...)
			return ok
		case "error":
			return s.null()
		case "result":
			// A second result would be decoded into the first one's receipts, field by
			// field: left to encoding/json.
			results++
			return results == 1 && s.receipts(&a.Result)
		default:
			_, ok := s.skip(0)
			return ok
		}
	})
}

// receipts reads a result: null, or an array of receipt objects (an empty one is an empty
// slice, not nil, as encoding/json has it).
func (s *fastScanner) receipts(dst *[]*rpcReceipt) bool {
	if s.null() {
		*dst = nil
		return true
	}
	if !s.consume('[') {
		return false
	}
	out := []*rpcReceipt{}
	if !s.consume(']') {
		for {
			r := new(rpcReceipt)
			if !s.receipt(r) {
				return false
			}
			out = append(out, r)
			if s.consume(']') {
				break
			}
			if !s.consume(',') {
				return false
			}
		}
	}
	*dst = out
	return true
}

var receiptFields = []string{"transactionHash", "status", "blockNumber", "blockHash", "transactionIndex", "gasUsed",
	"effectiveGasPrice", "contractAddress", "l1Fee", "type"}

// receipt reads one receipt object into r: each field it knows through that field's own
// UnmarshalJSON, as encoding/json would; a null sets a pointer field to nil.
func (s *fastScanner) receipt(r *rpcReceipt) bool {
	return s.object(receiptFields, func(name string) bool {
		var target json.Unmarshaler
		switch name {
		case "":
			_, ok := s.skip(0)
			return ok
		case "transactionHash":
			target = &r.TxHash
		case "transactionIndex":
			target = &r.TransactionIndex
		case "gasUsed":
			target = &r.GasUsed
		case "type":
			target = &r.Type
		case "status":
			return setPointer(s, &r.Status)
		case "blockNumber":
			return setPointer(s, &r.BlockNumber)
		case "blockHash":
			return setPointer(s, &r.BlockHash)
		case "effectiveGasPrice":
			return setPointer(s, &r.EffectiveGasPrice)
		case "contractAddress":
			return setPointer(s, &r.ContractAddress)
		case "l1Fee":
			return setPointer(s, &r.L1Fee)
		}
		raw, ok := s.quoted()
		return ok && target.UnmarshalJSON(raw) == nil
	})
}

// setPointer reads a pointer field's value: null leaves it nil, a string is decoded into a
// new value.
func setPointer[T any, P interface {
	*T
	json.Unmarshaler
}](s *fastScanner, field **T) bool {
	if s.null() {
		*field = nil
		return true
	}
	raw, ok := s.quoted()
	if !ok {
		return false
	}
	v := P(new(T))
	if v.UnmarshalJSON(raw) != nil {
		return false
	}
	*field = (*T)(v)
	return true
}
