package domain

import "math/big"

// OPStackFeeParams are what an OP-stack chain prices a transaction's L1 data with: the L1
// base fee and blob base fee, and the chain's two scalars, as its L1Block predeploy holds
// them for the block (Ecotone and later).
type OPStackFeeParams struct {
	L1BaseFee, BlobBaseFee           *big.Int
	BaseFeeScalar, BlobBaseFeeScalar uint32
}

// The Fjord data-size estimate: a linear fit of the compressed size, in millionths, never
// below the size of a minimal transaction. These are the protocol's constants.
const (
	fjordMinTxSize     = 100
	fjordIntercept     = -42_585_600
	fjordFastLZCoef    = 836_500
	fjordScaleDivisor  = 1_000_000_000_000 // 1e6 for the size, 1e6 for the scalars
	unsignedTxOverhead = 68                // what a signature adds to an unsigned transaction
)

// L1Fee is the L1 data fee the chain charges for signedTx, the transaction as it is sent
// (its typed envelope): the Fjord rule, on the FastLZ-compressed size.
func (p OPStackFeeParams) L1Fee(signedTx []byte) *big.Int {
	return p.fjordCost(int64(FastLZCompressedLen(signedTx)))
}

// L1FeeUpperBound is the most the L1 data fee can be for a transaction of unsignedSize
// bytes before signing, whatever its content: FastLZ's output never exceeds its input by
// more than one byte per 32 literal bytes, plus one. This is deliberately above the
// GasPriceOracle's getL1FeeUpperBound, which allows one byte per 255 and so is exceeded by
// call data that does not compress (5,000 random bytes pay about 2% more than it says).
func (p OPStackFeeParams) L1FeeUpperBound(unsignedSize int) *big.Int {
	size := int64(unsignedSize + unsignedTxOverhead)
	return p.fjordCost(size + size/fastLZMaxLiteral + 1)
}

func (p OPStackFeeParams) fjordCost(compressedSize int64) *big.Int {
	estimated := max(fjordMinTxSize*1_000_000, fjordIntercept+fjordFastLZCoef*compressedSize)
	perByte := new(big.Int).Mul(big.NewInt(int64(p.BaseFeeScalar)), nonNilWei(p.L1BaseFee))
	perByte.Mul(perByte, big.NewInt(16))
	perByte.Add(perByte, new(big.Int).Mul(big.NewInt(int64(p.BlobBaseFeeScalar)), nonNilWei(p.BlobBaseFee)))
	fee := perByte.Mul(perByte, big.NewInt(estimated))
	return fee.Quo(fee, big.NewInt(fjordScaleDivisor))
}

func nonNilWei(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}

// FastLZ level 1, as the OP-stack sizes transactions with it since Fjord: only the length
// of the output matters, so this counts the bytes each literal run and each match would
// take without writing them. Every detail (the hash, the table starting at zero, the
// 8 KiB window, the 13-byte tail left as literals) must be the protocol's: the fee is
// consensus.
const (
	fastLZHashBits   = 13
	fastLZMaxDist    = 0x1fff
	fastLZTail       = 13
	fastLZMaxLiteral = 32
	fastLZMaxMatch   = 262
)

// FastLZCompressedLen is the size FastLZ level 1 compresses b to.
func FastLZCompressedLen(b []byte) int {
	var table [1 << fastLZHashBits]int
	three := func(i int) uint32 { return uint32(b[i]) | uint32(b[i+1])<<8 | uint32(b[i+2])<<16 }
	slot := func(v uint32) int { return int((2654435769 * v) >> (32 - fastLZHashBits) & (1<<fastLZHashBits - 1)) }
	size := 0
	literals := func(run int) {
		size += (fastLZMaxLiteral + 1) * (run / fastLZMaxLiteral)
		if rest := run % fastLZMaxLiteral; rest > 0 {
			size += rest + 1
		}
	}
	match := func(length int) {
		length--
		size += 3 * (length / fastLZMaxMatch)
		if length%fastLZMaxMatch >= 6 {
			size += 3
		} else {
			size += 2
		}
	}
	// matchLen counts equal bytes from p and q, stopping at end (as q+n), plus one when a
	// difference stopped it: the count the format's encoder carries on with.
	matchLen := func(p, q, end int) int {
		n := 0
		for limit := end - q; n < limit; n++ {
			if b[p+n] != b[q+n] {
				limit = 0
			}
		}
		return n
	}
	remember := func(i int) int {
		table[slot(three(i))] = i
		return i + 1
	}
	limit := max(len(b)-fastLZTail, 0)
	anchor := 0
	for ip := 2; ip < limit; {
		var ref int
		for {
			seq := three(ip)
			h := slot(seq)
			ref = table[h]
			table[h] = ip
			dist := ip - ref
			if ip >= limit {
				break
			}
			ip++
			if dist <= fastLZMaxDist && seq == three(ref) {
				break
			}
		}
		if ip >= limit {
			break
		}
		ip--
		if ip > anchor {
			literals(ip - anchor)
		}
		length := matchLen(ref+3, ip+3, limit+9)
		match(length)
		ip = remember(remember(ip + length))
		anchor = ip
	}
	literals(len(b) - anchor)
	return size
}
