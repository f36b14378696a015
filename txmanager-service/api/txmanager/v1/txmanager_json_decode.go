// Fast JSON decoding of the create request, written by hand. A create body is a flat object
// of short ASCII strings and two integers, yet protojson's reflection spent about 4% of the
// service's CPU in bench-chain reading it. The fast path takes only the plain shape clients
// send and gives up on anything else (escapes, non-ASCII, null, numbers in other forms, a
// field twice), which then goes through protojson as before, so protojson alone decides every
// error message and every unusual input. FuzzDecodeCreateTxFast holds the fast path to
// protojson's result for every body it takes.

package v1

import "strconv"

// jsonFastDecoder is implemented by messages with a hand-written fast-path decoder.
type jsonFastDecoder interface {
	// decodeJSONFast fills the message from body and reports true, or reports false with
	// the message half filled, for protojson to reset and decode.
	decodeJSONFast(body []byte) bool
}

func (x *CreateTxRequest) decodeJSONFast(body []byte) bool {
	x.Reset()
	s := jsonScanner{b: body}
	if !s.byte('{') {
		return false
	}
	var seen uint16
	if !s.byte('}') {
		for {
			key, ok := s.plainString()
			if !ok || !s.byte(':') {
				return false
			}
			bit, str, num := x.fastField(key)
			if bit == 0 || seen&bit != 0 {
				return false
			}
			seen |= bit
			if num != nil {
				ok = s.uint64(num)
			} else {
				var v []byte
				v, ok = s.plainString()
				*str = string(v)
			}
			if !ok {
				return false
			}
			if s.byte('}') {
				break
			}
			if !s.byte(',') {
				return false
			}
		}
	}
	s.space()
	return s.i == len(s.b)
}

// fastField is where the field named goes, under either name protojson accepts (the JSON
// lowerCamelCase name or the proto name): a string or a 64-bit integer, with the bit that
// marks the field seen (0: not a field of the message).
func (x *CreateTxRequest) fastField(name []byte) (bit uint16, str *string, num *uint64) {
	switch string(name) {
	case "signer":
		return 1 << 0, &x.Signer, nil
	case "requestId", "request_id":
		return 1 << 1, &x.RequestId, nil
	case "to":
		return 1 << 2, &x.To, nil
	case "value":
		return 1 << 3, &x.Value, nil
	case "data":
		return 1 << 4, &x.Data, nil
	case "gasLimit", "gas_limit":
		return 1 << 5, nil, &x.GasLimit
	case "maxFeePerGas", "max_fee_per_gas":
		return 1 << 6, &x.MaxFeePerGas, nil
	case "maxPriorityFeePerGas", "max_priority_fee_per_gas":
		return 1 << 7, &x.MaxPriorityFeePerGas, nil
	case "chainId", "chain_id":
		return 1 << 8, nil, &x.ChainId
	}
	return 0, nil, nil
}

// jsonScanner reads the plain subset of JSON the fast paths take.
type jsonScanner struct {
	b []byte
	i int
}

// space skips the whitespace JSON allows between tokens.
func (s *jsonScanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c after any whitespace, if it comes next.
func (s *jsonScanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// plainString reads a string of printable ASCII without escapes; anything else in it makes
// the fast path give up (protojson then checks escapes and UTF-8 itself).
func (s *jsonScanner) plainString() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < 0x20 || c > 0x7e || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// uint64 reads a 64-bit unsigned integer written as protojson writes one: decimal digits
// without a leading zero, bare or quoted.
func (s *jsonScanner) uint64(dst *uint64) bool {
	s.space()
	quoted := s.i < len(s.b) && s.b[s.i] == '"'
	if quoted {
		s.i++
	}
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	digits := s.b[start:s.i]
	if len(digits) == 0 || (len(digits) > 1 && digits[0] == '0') {
		return false
	}
	if quoted {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		s.i++
	}
	v, err := strconv.ParseUint(string(digits), 10, 64)
	if err != nil {
		return false
	}
	*dst = v
	return true
}

// decodeJSONFast reads a batch of creates, `{"creates":[{...},...]}`, each create through
// its own fast path; anything else goes to protojson.
func (x *CreateTxBatchRequest) decodeJSONFast(body []byte) bool {
	x.Reset()
	s := jsonScanner{b: body}
	if !s.byte('{') {
		return false
	}
	key, ok := s.plainString()
	if !ok || string(key) != "creates" || !s.byte(':') || !s.byte('[') {
		return false
	}
	if !s.byte(']') {
		for {
			s.space()
			end := flatObjectEnd(s.b, s.i)
			if end < 0 {
				return false
			}
			create := &CreateTxRequest{}
			if !create.decodeJSONFast(s.b[s.i:end]) {
				return false
			}
			x.Creates = append(x.Creates, create)
			s.i = end
			if s.byte(']') {
				break
			}
			if !s.byte(',') {
				return false
			}
		}
	}
	if !s.byte('}') {
		return false
	}
	s.space()
	return s.i == len(s.b)
}

// flatObjectEnd is the index just past the object that starts at b[i], for an object with
// no nested object or array and no escape in its strings (the only kind the create's fast
// path takes); -1 for anything else.
func flatObjectEnd(b []byte, i int) int {
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	inString := false
	for j := i + 1; j < len(b); j++ {
		switch c := b[j]; {
		case c == '\\':
			return -1
		case c == '"':
			inString = !inString
		case inString:
		case c == '}':
			return j + 1
		case c == '{' || c == '[':
			return -1
		}
	}
	return -1
}
