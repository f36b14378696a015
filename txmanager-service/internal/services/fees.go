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
	// MinTip is the lowest tip signed where the intent names none (nil: none): the floor
	// a network's validators keep (Polygon PoS takes nothing under 30 gwei), whatever the
	// node suggests. MaxTipCap still wins over it.
	MinTip *big.Int
	// NodeTxFeeCap is the most a node takes for one transaction's fee, gas limit x fee cap
	// (nil: no such limit); ForGasLimit turns it into a fee cap per gas.
	NodeTxFeeCap *big.Int
	// BumpPercent raises both fees of a replacement over the previous attempt; nodes
	// require at least 10% (geth's default price bump), so the default is 12.
	BumpPercent int64
	// BaseFeeMultiplier sizes the fee cap as multiplier x base fee + tip, room for the base
	// fee to rise for a few blocks (default 2).
	BaseFeeMultiplier int64
}

// Initial returns the fees of a first attempt. The intent's explicit caps win: a client
// that names a fee gets exactly that fee, even one the chain will not mine. On a chain
// without a base fee (s.Legacy) both are the one gas price a legacy transaction carries.
func (p FeePolicy) Initial(intent domain.Intent, s FeeSuggestion) (maxFee, maxTip *big.Int, err error) {
	if s.Legacy {
		price := intent.MaxFeePerGas
		if price == nil {
			price = clamp(new(big.Int).Set(nonNil(s.GasPrice)), p.MaxFeeCap)
		}
		return price, price, nil
	}
	maxTip = intent.MaxPriorityFeePerGas
	if maxTip == nil {
		maxTip = clamp(new(big.Int).Set(maxOf(nonNil(s.TipCap), nonNil(p.MinTip))), p.MaxTipCap)
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

// CappedBy is the policy with caps no higher than maxFee and maxTip (nil: unchanged): a
// client that named its fees set the most its transaction may ever pay.
func (p FeePolicy) CappedBy(maxFee, maxTip *big.Int) FeePolicy {
	lower := func(cap, limit *big.Int) *big.Int {
		if limit == nil || (cap != nil && cap.Cmp(limit) <= 0) {
			return cap
		}
		return limit
	}
	p.MaxFeeCap, p.MaxTipCap = lower(p.MaxFeeCap, maxFee), lower(p.MaxTipCap, maxTip)
	return p
}

// ForGasLimit is the policy for a transaction of gasLimit: no fee cap per gas above what the
// node's own limit on its fee allows (NodeTxFeeCap / gasLimit), so no first attempt,
// re-pricing or outbid is one the node refuses for its fee.
func (p FeePolicy) ForGasLimit(gasLimit uint64) FeePolicy {
	if p.NodeTxFeeCap == nil || gasLimit == 0 {
		return p
	}
	return p.CappedBy(new(big.Int).Quo(p.NodeTxFeeCap, new(big.Int).SetUint64(gasLimit)), nil)
}

// ForAdmittedGas is the policy for a transaction signed with gasLimit after it was admitted
// with admittedGas (a limit raised since, for the L1 part Arbitrum counts as gas): no fee
// cap per gas above MaxFeeCap x admittedGas / gasLimit, so its worst-case fee stays within
// what the funds check, the spending policies and the client's own cap counted.
func (p FeePolicy) ForAdmittedGas(admittedGas, gasLimit uint64) FeePolicy {
	if p.MaxFeeCap == nil || admittedGas == 0 || gasLimit <= admittedGas {
		return p
	}
	limit := new(big.Int).Mul(p.MaxFeeCap, new(big.Int).SetUint64(admittedGas))
	p.MaxFeeCap = limit.Quo(limit, new(big.Int).SetUint64(gasLimit))
	return p
}

// RepriceAction is what a rebroadcast does with the attempt's fees.
type RepriceAction int

const (
	// KeepFees: the attempt pays at least what a fresh one would; send the same bytes.
	KeepFees RepriceAction = iota
	// RaiseFees: sign a replacement with the returned fees.
	RaiseFees
	// AtFeeCap: it is underpriced, but no replacement the node would take fits under the
	// caps; send the same bytes and keep waiting (the stuck policy applies).
	AtFeeCap
)

// Reprice decides the fees of a transaction that is due to be broadcast again because it
// was not mined in time. An attempt priced at or above what a fresh attempt would pay now is
// sent again as it is (it was dropped, or the chain is slow). One priced below is outbid
// (Outbid).
func (p FeePolicy) Reprice(prevFee, prevTip *big.Int, s FeeSuggestion) (maxFee, maxTip *big.Int, action RepriceAction) {
	prevFee, prevTip = nonNil(prevFee), nonNil(prevTip)
	freshFee, freshTip, _ := p.Initial(domain.Intent{}, s)
	if prevFee.Cmp(freshFee) >= 0 && prevTip.Cmp(freshTip) >= 0 {
		return prevFee, prevTip, KeepFees
	}
	return p.Outbid(prevFee, prevTip, s)
}

// Outbid decides the fees of a replacement for an attempt a node refused as underpriced,
// whatever the market says (the node's own floor, or a pool entry at the same nonce, may be
// above it): at least BumpPercent above it on both fees (the node's replacement rule) and
// at the fresh price when that is higher, but never above the caps. Without configured caps
// it goes no higher than maxOutbidOfMarket times the fresh price, so that a node that keeps
// refusing cannot compound the fees without end. When the caps leave no room for a valid
// replacement it keeps waiting at its price (AtFeeCap).
func (p FeePolicy) Outbid(prevFee, prevTip *big.Int, s FeeSuggestion) (maxFee, maxTip *big.Int, action RepriceAction) {
	prevFee, prevTip = nonNil(prevFee), nonNil(prevTip)
	freshFee, freshTip, _ := p.Initial(domain.Intent{}, s)
	feeCap, tipCap := p.MaxFeeCap, p.MaxTipCap
	if feeCap == nil {
		feeCap = new(big.Int).Mul(freshFee, big.NewInt(maxOutbidOfMarket))
	}
	minFee, minTip := bumped(prevFee, p.bumpPercent()), bumped(prevTip, p.bumpPercent())
	if tipCap == nil {
		// At least the replacement rule's tip, where the market's tip fell (to 0 on some
		// chains): the tip stays under the fee, whose own bound keeps the whole from
		// compounding.
		tipCap = maxOf(new(big.Int).Mul(freshTip, big.NewInt(maxOutbidOfMarket)), minTip)
	}
	maxFee = clamp(maxOf(minFee, freshFee), feeCap)
	maxTip = clamp(maxOf(minTip, freshTip), tipCap)
	if s.Legacy {
		maxTip = maxFee
	}
	if maxTip.Cmp(maxFee) > 0 {
		maxTip = new(big.Int).Set(maxFee)
	}
	if maxFee.Cmp(minFee) < 0 || maxTip.Cmp(minTip) < 0 {
		return prevFee, prevTip, AtFeeCap
	}
	if maxFee.Cmp(prevFee) <= 0 && maxTip.Cmp(prevTip) <= 0 {
		// Nothing rises (zero fees on a chain whose base fee and tips are 0): the same
		// price signed again would be refused again, a new signature each time.
		return prevFee, prevTip, AtFeeCap
	}
	return maxFee, maxTip, RaiseFees
}

// maxOutbidOfMarket bounds outbidding without configured caps: at most this many times
// what a fresh attempt would pay now.
const maxOutbidOfMarket = 3

func (p FeePolicy) bumpPercent() int64 {
	if p.BumpPercent < 10 {
		return 12
	}
	return p.BumpPercent
}

// bumped is ceil(v * (100 + percent) / 100), and at least v + 1 so tiny values still rise;
// 0 stays 0: a node's replacement rule asks nothing above a zero tip (0 x 110% is 0), and a
// chain whose tips are 0 (Arbitrum) would otherwise never be outbid within its tip cap.
func bumped(v *big.Int, percent int64) *big.Int {
	v = nonNil(v)
	if v.Sign() == 0 {
		return new(big.Int)
	}
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
