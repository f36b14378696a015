// Fast JSON encoding of the hottest responses, written by hand. The output is the proto3
// JSON mapping exactly as protojson writes it with EmitUnpopulated (lowerCamelCase names,
// 64-bit integers as strings, RFC 3339 timestamps, null for absent messages);
// txmanager_json_test.go checks that protojson decodes it back to the same message.
// protojson's reflection costs more CPU than the rest of a create request's handling.

package v1

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/timestamppb"
)

// JSONAppender is implemented by messages with a hand-written encoder.
type JSONAppender interface {
	AppendJSON(b []byte) []byte
}

// AppendJSON implements JSONAppender.
func (x *CreateTxResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"tx":`...)
	b = appendTx(b, x.GetTx())
	b = append(b, `,"created":`...)
	b = strconv.AppendBool(b, x.GetCreated())
	return append(b, '}')
}

// AppendJSON implements JSONAppender.
func (x *Tx) AppendJSON(b []byte) []byte { return appendTx(b, x) }

// AppendJSON implements JSONAppender: a batch's answer is its creates' answers, written as
// each single create's is.
func (x *CreateTxBatchResponse) AppendJSON(b []byte) []byte {
	b = append(b, `{"results":[`...)
	for i, r := range x.GetResults() {
		if i > 0 {
			b = append(b, ',')
		}
		switch {
		case r.GetResponse() != nil:
			b = append(b, `{"response":`...)
			b = r.GetResponse().AppendJSON(b)
			b = append(b, '}')
		case r.GetError() != nil:
			b = appendCreateTxError(append(b, `{"error":`...), r.GetError())
			b = append(b, '}')
		default:
			b = append(b, `{}`...)
		}
	}
	b = append(b, `],"created":`...)
	b = strconv.AppendUint(b, uint64(x.GetCreated()), 10)
	b = append(b, `,"replayed":`...)
	b = strconv.AppendUint(b, uint64(x.GetReplayed()), 10)
	b = append(b, `,"refused":`...)
	b = strconv.AppendUint(b, uint64(x.GetRefused()), 10)
	return append(b, '}')
}

func appendCreateTxError(b []byte, e *CreateTxError) []byte {
	b = append(b, `{"httpStatus":`...)
	b = strconv.AppendInt(b, int64(e.GetHttpStatus()), 10)
	b = append(b, `,"reason":`...)
	b = appendString(b, e.GetReason())
	b = append(b, `,"message":`...)
	b = appendString(b, e.GetMessage())
	b = append(b, `,"metadata":{`...)
	keys := make([]string, 0, len(e.GetMetadata()))
	for k := range e.GetMetadata() {
		keys = append(keys, k)
	}
	slices.Sort(keys) // protojson writes map entries in key order
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, e.GetMetadata()[k])
	}
	return append(b, `}}`...)
}

func appendTx(b []byte, x *Tx) []byte {
	if x == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"txId":`...)
	b = appendString(b, x.TxId)
	b = append(b, `,"chainId":`...)
	b = appendUint64String(b, x.ChainId)
	b = append(b, `,"signer":`...)
	b = appendString(b, x.Signer)
	b = append(b, `,"requestId":`...)
	b = appendString(b, x.RequestId)
	b = append(b, `,"nonce":`...)
	b = appendUint64String(b, x.Nonce)
	b = append(b, `,"state":`...)
	b = appendString(b, x.State)
	b = append(b, `,"subState":`...)
	b = appendString(b, x.SubState)
	b = append(b, `,"to":`...)
	b = appendString(b, x.To)
	b = append(b, `,"value":`...)
	b = appendString(b, x.Value)
	b = append(b, `,"data":`...)
	b = appendString(b, x.Data)
	b = append(b, `,"gasLimit":`...)
	b = appendUint64String(b, x.GasLimit)
	b = append(b, `,"txHash":`...)
	b = appendString(b, x.TxHash)
	b = append(b, `,"submitAttempts":`...)
	b = strconv.AppendUint(b, uint64(x.SubmitAttempts), 10)
	b = append(b, `,"lastError":`...)
	b = appendString(b, x.LastError)
	b = append(b, `,"receipt":`...)
	b = appendReceipt(b, x.Receipt)
	b = append(b, `,"createdAt":`...)
	b = appendTimestamp(b, x.CreatedAt)
	b = append(b, `,"updatedAt":`...)
	b = appendTimestamp(b, x.UpdatedAt)
	b = append(b, `,"confirmedAt":`...)
	b = appendTimestamp(b, x.ConfirmedAt)
	b = append(b, `,"recovered":`...)
	b = strconv.AppendBool(b, x.Recovered)
	return append(b, '}')
}

func appendReceipt(b []byte, r *Receipt) []byte {
	if r == nil {
		return append(b, "null"...)
	}
	b = append(b, `{"txHash":`...)
	b = appendString(b, r.TxHash)
	b = append(b, `,"status":`...)
	b = appendUint64String(b, r.Status)
	b = append(b, `,"blockNumber":`...)
	b = appendUint64String(b, r.BlockNumber)
	b = append(b, `,"blockHash":`...)
	b = appendString(b, r.BlockHash)
	b = append(b, `,"gasUsed":`...)
	b = appendUint64String(b, r.GasUsed)
	b = append(b, `,"effectiveGasPrice":`...)
	b = appendString(b, r.EffectiveGasPrice)
	b = append(b, `,"l1Fee":`...)
	b = appendString(b, r.L1Fee)
	b = append(b, `,"fee":`...)
	b = appendString(b, r.Fee)
	return append(b, '}')
}

func appendUint64String(b []byte, v uint64) []byte {
	b = append(b, '"')
	b = strconv.AppendUint(b, v, 10)
	return append(b, '"')
}

// appendTimestamp writes RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits, as protojson.
func appendTimestamp(b []byte, ts *timestamppb.Timestamp) []byte {
	if ts == nil {
		return append(b, "null"...)
	}
	t := time.Unix(ts.GetSeconds(), int64(ts.GetNanos())).UTC()
	b = append(b, '"')
	b = t.AppendFormat(b, "2006-01-02T15:04:05")
	if nanos := ts.GetNanos(); nanos != 0 {
		frac := strconv.AppendInt(make([]byte, 0, 10), int64(nanos)+1e9, 10)[1:] // 9 digits
		for len(frac) > 3 && string(frac[len(frac)-3:]) == "000" {
			frac = frac[:len(frac)-3]
		}
		b = append(b, '.')
		b = append(b, frac...)
	}
	return append(b, `Z"`...)
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, "\ufffd"...)
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
