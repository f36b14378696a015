package domain

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"golang.org/x/crypto/sha3"
)

// ErrInvalidPayout wraps every reason a payout request is refused; the controller answers
// 400 with the reason's text.
var ErrInvalidPayout = errors.New("invalid payout")

// ErrPayoutNotFound: no payout has that id.
var ErrPayoutNotFound = errors.New("payout not found")

// ErrIdempotencyConflict: the Idempotency-Key was used before for a different payout.
var ErrIdempotencyConflict = errors.New("idempotency key already used for a different payout")

// maxIdempotencyKey bounds what a client may store with a payout.
const maxIdempotencyKey = 128

// maxUint256 is the largest value an EVM transfer can carry.
var maxUint256 = new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1))

// NewPayout is a validated request: To is a 0x address and AmountWei a positive decimal
// that fits uint256, canonical (no sign, no leading zeros).
type NewPayout struct {
	IdempotencyKey string
	To             string
	AmountWei      string
}

// ParseNewPayout checks a request as it arrived. Everything txmanager would refuse is
// refused here, so a payout that is accepted is one the relay can send.
func ParseNewPayout(to, amount, idempotencyKey string) (NewPayout, error) {
	if err := checkAddress(to); err != nil {
		return NewPayout{}, err
	}
	wei, err := parseWei(amount)
	if err != nil {
		return NewPayout{}, err
	}
	if len(idempotencyKey) > maxIdempotencyKey {
		return NewPayout{}, fmt.Errorf("%w: Idempotency-Key longer than %d characters", ErrInvalidPayout, maxIdempotencyKey)
	}
	for _, r := range idempotencyKey {
		if r < 0x21 || r > 0x7e {
			return NewPayout{}, fmt.Errorf("%w: Idempotency-Key must be visible ASCII", ErrInvalidPayout)
		}
	}
	return NewPayout{IdempotencyKey: idempotencyKey, To: to, AmountWei: wei.String()}, nil
}

// Same reports whether an earlier payout answers this request (an Idempotency-Key replay).
func (n NewPayout) Same(p Payout) bool {
	return strings.EqualFold(n.To, p.To) && n.AmountWei == p.AmountWei
}

func checkAddress(to string) error {
	if to == "" {
		return fmt.Errorf("%w: to is required", ErrInvalidPayout)
	}
	body, ok := strings.CutPrefix(to, "0x")
	if !ok || len(body) != 40 {
		return fmt.Errorf("%w: to must be 0x followed by 40 hex digits", ErrInvalidPayout)
	}
	raw, err := hex.DecodeString(body)
	if err != nil {
		return fmt.Errorf("%w: to must be 0x followed by 40 hex digits", ErrInvalidPayout)
	}
	if new(big.Int).SetBytes(raw).Sign() == 0 {
		// Nobody holds the zero address's key: a payment there is burnt.
		return fmt.Errorf("%w: to is the zero address", ErrInvalidPayout)
	}
	// Mixed case is an EIP-55 checksum: a typo in it would send the money to a stranger.
	if body != strings.ToLower(body) && body != strings.ToUpper(body) && checksum(body) != body {
		return fmt.Errorf("%w: to has an invalid EIP-55 checksum", ErrInvalidPayout)
	}
	return nil
}

// checksum is the EIP-55 spelling of a 40-digit hex address (without 0x).
func checksum(body string) string {
	lower := strings.ToLower(body)
	h := sha3.NewLegacyKeccak256()
	h.Write([]byte(lower))
	digest := h.Sum(nil)
	out := []byte(lower)
	for i, c := range out {
		nibble := digest[i/2]
		if i%2 == 0 {
			nibble >>= 4
		}
		if c >= 'a' && nibble&0x0f >= 8 {
			out[i] = c - 'a' + 'A'
		}
	}
	return string(out)
}

func parseWei(amount string) (*big.Int, error) {
	if amount == "" {
		return nil, fmt.Errorf("%w: amount is required (wei, decimal string)", ErrInvalidPayout)
	}
	for _, r := range amount {
		if r < '0' || r > '9' {
			return nil, fmt.Errorf("%w: amount must be a decimal number of wei (digits only)", ErrInvalidPayout)
		}
	}
	wei, _ := new(big.Int).SetString(amount, 10)
	switch {
	case wei.Sign() == 0:
		return nil, fmt.Errorf("%w: amount must be positive", ErrInvalidPayout)
	case wei.Cmp(maxUint256) > 0:
		return nil, fmt.Errorf("%w: amount exceeds uint256", ErrInvalidPayout)
	}
	return wei, nil
}
