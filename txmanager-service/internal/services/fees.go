package services

import (
	"errors"
	"fmt"
	"math/big"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ErrFeeCapReached: the fees a transaction needs exceed the configured caps.
var ErrFeeCapReached = errors.New("fee cap reached")

// FeePolicy turns the chain's fee suggestion and the intent's own caps into EIP-1559 fees,
// and bumps them for replacements. Pure functions: table-tested in fees_test.go.
type FeePolicy struct {
	// MaxFeeCap and MaxTipCap bound every fee the service signs (nil: unbounded).
	MaxFeeCap *big.Int
	MaxTipCap *big.Int
	// BumpPercent raises both fees of a replacement over the previous attempt; nodes
	// require at least 10% (geth's default price bump), so the default is 12.
	BumpPercent int64
	// BaseFeeMultiplier sizes the fee cap as multiplier x base fee + tip, room for the base
	// fee to rise for a few blocks (default 2).
	BaseFeeMultiplier int64
}

// Initial returns the fees of a first attempt. The intent's explicit caps win: a client
// that names a fee gets exactly that fee, even one the chain will not mine.
func (p FeePolicy) Initial(intent domain.Intent, s FeeSuggestion) (maxFee, maxTip *big.Int, err error) {
	maxTip = intent.MaxPriorityFeePerGas
	if maxTip == nil {
		maxTip = clamp(new(big.Int).Set(nonNil(s.TipCap)), p.MaxTipCap)
	}
	maxFee = intent.MaxFeePerGas
	if maxFee == nil {
		multiplier := p.BaseFeeMultiplier
		if multiplier <= 0 {
			multiplier = 2
		}
		maxFee = new(big.Int).Mul(nonNil(s.BaseFee), big.NewInt(multiplier))
		maxFee.Add(maxFee, maxTip)
		maxFee = clamp(maxFee, p.MaxFeeCap)
	}
	if maxTip.Cmp(maxFee) > 0 {
		maxTip = new(big.Int).Set(maxFee)
	}
	return maxFee, maxTip, nil
}

// Bump returns fees for a replacement of an attempt signed with prevFee/prevTip: each at
// least BumpPercent above the previous one, and never below what a fresh attempt would
// pay now (a replacement of an underpriced attempt must clear the current base fee).
func (p FeePolicy) Bump(prevFee, prevTip *big.Int, s FeeSuggestion) (maxFee, maxTip *big.Int, err error) {
	freshFee, freshTip, _ := p.Initial(domain.Intent{}, s)
	maxTip = maxOf(bumped(prevTip, p.bumpPercent()), freshTip)
	maxFee = maxOf(bumped(prevFee, p.bumpPercent()), freshFee)
	if maxTip.Cmp(maxFee) > 0 {
		maxFee = new(big.Int).Set(maxTip)
	}
	if p.MaxFeeCap != nil && maxFee.Cmp(p.MaxFeeCap) > 0 {
		return nil, nil, fmt.Errorf("%w: replacement needs max fee %s, cap is %s", ErrFeeCapReached, maxFee, p.MaxFeeCap)
	}
	if p.MaxTipCap != nil && maxTip.Cmp(p.MaxTipCap) > 0 {
		return nil, nil, fmt.Errorf("%w: replacement needs tip %s, cap is %s", ErrFeeCapReached, maxTip, p.MaxTipCap)
	}
	return maxFee, maxTip, nil
}

func (p FeePolicy) bumpPercent() int64 {
	if p.BumpPercent < 10 {
		return 12
	}
	return p.BumpPercent
}

// bumped is ceil(v * (100 + percent) / 100), and at least v + 1 so tiny values still rise.
func bumped(v *big.Int, percent int64) *big.Int {
	v = nonNil(v)
	out := new(big.Int).Mul(v, big.NewInt(100+percent))
	out.Add(out, big.NewInt(99))
	out.Div(out, big.NewInt(100))
	if out.Cmp(v) <= 0 {
		out.Add(v, big.NewInt(1))
	}
	return out
}

func clamp(v, ceiling *big.Int) *big.Int {
	if ceiling != nil && v.Cmp(ceiling) > 0 {
		return new(big.Int).Set(ceiling)
	}
	return v
}

func maxOf(a, b *big.Int) *big.Int {
	if a.Cmp(b) >= 0 {
		return a
	}
	return new(big.Int).Set(b)
}

func nonNil(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}
