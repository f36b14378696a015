package domain

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"math/big"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/uuid"
)

// Intent is what a client asks the service to execute from a signer.
type Intent struct {
	To *common.Address // nil: contract creation
	// ToHex is To in EIP-55 form when known (see CreateRequest.SignerHex for why).
	ToHex                string
	Value                *big.Int // wei, never nil after parsing
	Data                 []byte
	GasLimit             uint64   // 0: estimate before allocation
	MaxFeePerGas         *big.Int // nil: from the chain at signing time
	MaxPriorityFeePerGas *big.Int // nil: from the chain at signing time
}

// CreateRequest is a validated request to create a managed transaction.
type CreateRequest struct {
	Signer common.Address
	// SignerHex is Signer in EIP-55 form, computed once: the checksum costs a keccak hash
	// and the signer's text is the key of every lease, queue and cache on the hot path.
	SignerHex string
	RequestID string // "" when the caller wants no request-level idempotency
	Intent    Intent
	// Admission is what the create path learnt of the request on its way to the writer,
	// for the spending policies checked there; not part of the intent.
	Admission Admission
}

// Admission is what the spending policies are checked against besides the intent.
type Admission struct {
	// Credential is the id of the credential the request came with ("" when
	// authentication is off).
	Credential string
	// FeeCapPerGas is the most the transaction may pay per gas: its own maxFeePerGas, or
	// the service's fee cap its replacements may reach (nil: unbounded).
	FeeCapPerGas *big.Int
	// RemainingAfter is what the signer can spend after its unfinished transactions and
	// this one's worst case (nil when the funds check is off).
	RemainingAfter *big.Int
	// DataFeeBound is the most the chain's L1 data fee may be for this transaction, at the
	// prices the funds check last read (nil on a chain without one, or with the funds check
	// off).
	DataFeeBound *big.Int
	// ApprovalID, when set, is the approved intent this create admits: it takes the
	// approval's id, skips the approval rule, and is allocated only while the approval is
	// APPROVED.
	ApprovalID uuid.UUID
	// AdoptOnly, when set, is the refusal the create met before the writer (the chain's
	// checks, the funds check) while a recovered transaction with its recovery key waited
	// for adoption: a lost request's retry whose intent already ran. The writer adopts a
	// recovered transaction for it, or refuses it with this error; it never gives it a new
	// nonce.
	AdoptOnly error
}

// Fingerprint identifies the intent for idempotency: the same requestId with the same
// fingerprint is a replay, with a different one a conflict. The gas limit counts as the
// client gave it (0 when left to estimation), so a replay matches before and after
// estimation.
func (r CreateRequest) Fingerprint() [32]byte {
	h := newFieldHash("txmanager-intent-v1", r)
	var gas [8]byte
	binary.BigEndian.PutUint64(gas[:], r.Intent.GasLimit)
	h.write(gas[:])
	h.write(bigBytes(r.Intent.MaxFeePerGas))
	h.write(bigBytes(r.Intent.MaxPriorityFeePerGas))
	return h.sum()
}

// RecoveryKey identifies what a transaction does on chain, for recognising a lost
// request's transaction when the request is retried: signer, recipient, value and data.
// Value is read as zero when unset (the chain has no "unset"); the gas limit and fees are
// not in it (a retry may leave them to estimation, and re-pricing changes the fees), and
// the chain is the row's own.
func (r CreateRequest) RecoveryKey() [32]byte {
	value := r.Intent.Value
	if value == nil {
		value = new(big.Int)
	}
	r.Intent.Value = value
	return newFieldHash("txmanager-recovery-v1", r).sum()
}

// fieldHash hashes length-prefixed fields, so no two field lists hash alike.
type fieldHash struct{ h hash.Hash }

// newFieldHash starts a hash with tag and the intent's signer, recipient, value and data.
func newFieldHash(tag string, r CreateRequest) fieldHash {
	f := fieldHash{h: sha256.New()}
	f.write([]byte(tag))
	f.write(r.Signer.Bytes())
	if r.Intent.To != nil {
		f.write(r.Intent.To.Bytes())
	} else {
		f.write(nil)
	}
	f.write(bigBytes(r.Intent.Value))
	f.write(r.Intent.Data)
	return f
}

func (f fieldHash) write(b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	f.h.Write(n[:])
	f.h.Write(b)
}

func (f fieldHash) sum() [32]byte {
	var sum [32]byte
	f.h.Sum(sum[:0])
	return sum
}

// bigBytes distinguishes nil ("unset") from zero.
func bigBytes(v *big.Int) []byte {
	if v == nil {
		return []byte{0xff}
	}
	return append([]byte{0x00}, v.Bytes()...)
}

// Limits bound what a create request may carry.
type Limits struct {
	MaxDataBytes       int
	MaxGasLimit        uint64
	MaxRequestIDLength int
	// NodeTxFeeCap is the most a node takes for one transaction's fee, gas limit x fee
	// cap, in wei (nil: no such limit).
	NodeTxFeeCap *big.Int
}

// DefaultLimits are generous for real contract calls and small enough to bound memory.
func DefaultLimits() Limits {
	return Limits{MaxDataBytes: 128 << 10, MaxGasLimit: params.MaxTxGas, MaxRequestIDLength: 128}
}

// CreateInput is a create request as text, straight from the API.
type CreateInput struct {
	Signer               string
	RequestID            string
	To                   string
	Value                string
	Data                 string
	GasLimit             uint64
	MaxFeePerGas         string
	MaxPriorityFeePerGas string
}

// minTransferGas is the intrinsic gas of the cheapest transaction.
const minTransferGas = 21_000

// The intrinsic gas schedule every EVM chain charges before a transaction runs (Istanbul
// call data, Shanghai's init-code words).
const (
	creationGas        = 32_000 // on top of minTransferGas for a contract creation
	zeroDataByteGas    = 4
	nonZeroDataByteGas = 16
	initCodeWordGas    = 2
)

// IntrinsicGas is what a transaction costs before it runs: 21000, 32000 more for a
// contract creation, its call data, and its init code's words. Every node refuses a gas
// limit below it ("intrinsic gas too low"), so a create asking for less is refused before
// a nonce is given. (Prague's call-data floor, EIP-7623, is not counted: it is not on
// every chain; a transaction under it is cancelled once a node refuses it.)
func IntrinsicGas(creation bool, data []byte) uint64 {
	gas := uint64(minTransferGas)
	if creation {
		gas += creationGas + initCodeWordGas*uint64((len(data)+31)/32)
	}
	for _, b := range data {
		if b == 0 {
			gas += zeroDataByteGas
		} else {
			gas += nonZeroDataByteGas
		}
	}
	return gas
}

// CallDataFloorGas is the least gas a transaction with data may carry since Prague
// (EIP-7623): 21000 plus 10 per token of call data, a zero byte one token and any other
// byte four. go-ethereum refuses less ("insufficient gas for floor data gas cost"); anvil
// takes it into its pool and never mines it.
func CallDataFloorGas(data []byte) uint64 {
	var tokens uint64
	for _, b := range data {
		if b == 0 {
			tokens++
		} else {
			tokens += 4
		}
	}
	return minTransferGas + 10*tokens
}

func intrinsicParts(creation bool) string {
	if creation {
		return "32000 for a creation, 2 per 32-byte word of init code, 4 per zero and 16 per other byte of data"
	}
	return "4 per zero and 16 per other byte of data"
}

// maxUint256 bounds every wei amount.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// ParseCreateRequest validates in against limits. Every failure is a *ValidationError naming
// the field, so nothing reaches nonce allocation unless it is well-formed.
func ParseCreateRequest(in CreateInput, limits Limits) (CreateRequest, error) {
	var req CreateRequest
	var err error
	if req.Signer, req.SignerHex, err = parseAddressHex("signer", in.Signer); err != nil {
		return req, err
	}
	if req.RequestID, err = ParseRequestID(in.RequestID, limits.MaxRequestIDLength); err != nil {
		return req, err
	}
	if in.To != "" {
		to, toHex, err := parseAddressHex("to", in.To)
		if err != nil {
			return req, err
		}
		req.Intent.To, req.Intent.ToHex = &to, toHex
	}
	if req.Intent.Value, err = ParseWei("value", in.Value); err != nil {
		return req, err
	}
	if req.Intent.Data, err = ParseHexData("data", in.Data, limits.MaxDataBytes); err != nil {
		return req, err
	}
	if req.Intent.To == nil && len(req.Intent.Data) == 0 {
		return req, invalid("to", "required unless data carries contract creation code")
	}
	if in.GasLimit != 0 && (in.GasLimit < minTransferGas || in.GasLimit > limits.MaxGasLimit) {
		return req, invalid("gasLimit", "must be between %d and %d", minTransferGas, limits.MaxGasLimit)
	}
	if need := IntrinsicGas(req.Intent.To == nil, req.Intent.Data); in.GasLimit != 0 && in.GasLimit < need {
		return req, invalid("gasLimit", "is below the %d gas this intent costs before it runs (21000, plus %s); no node would take it", need, intrinsicParts(req.Intent.To == nil))
	}
	if floor := CallDataFloorGas(req.Intent.Data); in.GasLimit != 0 && in.GasLimit < floor {
		return req, invalid("gasLimit", "is below the %d gas Prague's call-data floor asks of this much data (EIP-7623: 21000 + 10 per token, a zero byte one token, any other four); a node refuses it, or takes it and never mines it", floor)
	}
	req.Intent.GasLimit = in.GasLimit
	if req.Intent.MaxFeePerGas, err = ParseOptionalWei("maxFeePerGas", in.MaxFeePerGas); err != nil {
		return req, err
	}
	if req.Intent.MaxPriorityFeePerGas, err = ParseOptionalWei("maxPriorityFeePerGas", in.MaxPriorityFeePerGas); err != nil {
		return req, err
	}
	if fee, tip := req.Intent.MaxFeePerGas, req.Intent.MaxPriorityFeePerGas; fee != nil && tip != nil && tip.Cmp(fee) > 0 {
		return req, invalid("maxPriorityFeePerGas", "must not exceed maxFeePerGas")
	}
	if fee, limit := req.Intent.MaxFeePerGas, limits.NodeTxFeeCap; fee != nil && limit != nil && req.Intent.GasLimit > 0 {
		if total := new(big.Int).Mul(fee, new(big.Int).SetUint64(req.Intent.GasLimit)); total.Cmp(limit) > 0 {
			return req, invalid("maxFeePerGas", "x gasLimit is %s wei, above the %s wei a node takes for one transaction's fee (fees.nodeTxFeeCap, as go-ethereum's --rpc.txfeecap); no node would take it", total, limit)
		}
	}
	return req, nil
}

// ParseAddress accepts 0x-prefixed 20-byte hex. Mixed case must carry a valid EIP-55
// checksum; all-lower or all-upper hex is accepted as unchecksummed. A malformed input is
// never echoed in the error: a private key pasted where an address belongs must not end
// up in a message.
func ParseAddress(field, s string) (common.Address, error) {
	addr, _, err := parseAddressHex(field, s)
	return addr, err
}

// parseAddressHex is ParseAddress that also returns the EIP-55 form, hashing only once.
func parseAddressHex(field, s string) (common.Address, string, error) {
	if s == "" {
		return common.Address{}, "", invalid(field, "required")
	}
	if len(s) != 42 || !strings.HasPrefix(s, "0x") {
		return common.Address{}, "", invalid(field, "must be 0x followed by 40 hex digits")
	}
	body := s[2:]
	if !isHex(body) {
		return common.Address{}, "", invalid(field, "must be 0x followed by 40 hex digits")
	}
	addr := common.HexToAddress(s)
	checksummed := checksums.hex(addr)
	if checksummed != s && isMixedCase(body) {
		return common.Address{}, "", invalid(field, "EIP-55 checksum mismatch (expected %s)", checksummed)
	}
	return addr, checksummed, nil
}

// ParseOptionalWei is ParseWei for a value that may be left out: "" is nil, not zero.
func ParseOptionalWei(field, s string) (*big.Int, error) {
	if s == "" {
		return nil, nil
	}
	return ParseWei(field, s)
}

// ParseWei accepts a non-negative decimal or 0x-hex integer up to 2^256-1; "" is zero.
func ParseWei(field, s string) (*big.Int, error) {
	if s == "" {
		return new(big.Int), nil
	}
	if len(s) > 80 {
		return nil, invalid(field, "too long for a 256-bit amount")
	}
	v := new(big.Int)
	var ok bool
	switch {
	case strings.HasPrefix(s, "0x"):
		ok = len(s) > 2 && isHex(s[2:])
		if ok {
			_, ok = v.SetString(s[2:], 16)
		}
	default:
		ok = isDecimal(s)
		if ok {
			_, ok = v.SetString(s, 10)
		}
	}
	if !ok {
		return nil, invalid(field, "must be a non-negative integer in decimal or 0x-hex")
	}
	if v.Cmp(maxUint256) > 0 {
		return nil, invalid(field, "exceeds 2^256-1")
	}
	return v, nil
}

// ParseHexData accepts "" or 0x-prefixed, even-length hex up to maxBytes bytes.
func ParseHexData(field, s string, maxBytes int) ([]byte, error) {
	if s == "" || s == "0x" {
		return nil, nil
	}
	if !strings.HasPrefix(s, "0x") {
		return nil, invalid(field, "must be 0x-prefixed hex")
	}
	if (len(s)-2)/2 > maxBytes {
		return nil, invalid(field, "longer than %d bytes", maxBytes)
	}
	if len(s)%2 != 0 {
		return nil, invalid(field, "odd number of hex digits")
	}
	b, err := hex.DecodeString(s[2:])
	if err != nil {
		return nil, invalid(field, "not valid hex")
	}
	return b, nil
}

// ParseRequestID accepts "" or up to maxLen visible ASCII characters.
func ParseRequestID(s string, maxLen int) (string, error) {
	if s == "" {
		return "", nil
	}
	if len(s) > maxLen {
		return "", invalid("requestId", "longer than %d characters", maxLen)
	}
	for _, r := range s {
		if r < 0x21 || r > 0x7e {
			return "", invalid("requestId", "only visible ASCII characters are allowed")
		}
	}
	return s, nil
}

func isDecimal(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// isMixedCase reports whether hex digits s use both lower- and upper-case letters, which
// makes them an EIP-55 checksum.
func isMixedCase(s string) bool {
	var lower, upper bool
	for _, c := range s {
		lower = lower || 'a' <= c && c <= 'f'
		upper = upper || 'A' <= c && c <= 'F'
	}
	return lower && upper
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// ParseReason accepts free text for the audit trail: valid UTF-8, no control characters,
// at most maxBytes bytes.
func ParseReason(field, s string, maxBytes int) (string, error) {
	if len(s) > maxBytes {
		return "", invalid(field, "longer than %d bytes", maxBytes)
	}
	if !utf8.ValidString(s) {
		return "", invalid(field, "not valid UTF-8")
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "", invalid(field, "control characters are not allowed")
		}
	}
	return s, nil
}
