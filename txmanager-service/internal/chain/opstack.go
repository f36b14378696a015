package chain

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// L1BlockAddress is the OP-stack predeploy that holds the L1 prices of the current block.
var L1BlockAddress = common.HexToAddress("0x4200000000000000000000000000000000000015")

// The L1Block predeploy's storage slots the data fee reads (Ecotone and later): the L1 base
// fee, the two scalars packed in one word with the sequence number, the blob base fee.
const (
	l1BaseFeeSlot     = 1
	l1FeeScalarsSlot  = 3
	l1BlobBaseFeeSlot = 7
)

// WithOPStackFees declares the chain an OP-stack one: receipts whose node does not report
// the L1 data fee (op-geth does; anvil's OP-stack mode, among others, does not) get it
// computed from the transaction and the L1 prices of its block, so the fee recorded is what
// the signer paid.
func WithOPStackFees(on bool) RPCOption {
	return func(c *RPCChain) { c.opStack = on }
}

// OPStackFeeParams reads the L1 prices and scalars an OP-stack chain charges data fees with
// at block (nil: the latest), from the L1Block predeploy's storage: the one source every
// OP-stack node has, whether or not it serves the GasPriceOracle's code.
func (c *RPCChain) OPStackFeeParams(ctx context.Context, block *big.Int) (domain.OPStackFeeParams, error) {
	at := "latest"
	if block != nil {
		at = hexutil.EncodeBig(block)
	}
	var words [3]hexutil.Bytes
	slots := []int64{l1BaseFeeSlot, l1FeeScalarsSlot, l1BlobBaseFeeSlot}
	elems := make([]rpc.BatchElem, len(slots))
	for i, slot := range slots {
		elems[i] = rpc.BatchElem{Method: "eth_getStorageAt", Args: []any{L1BlockAddress, hexutil.EncodeBig(big.NewInt(slot)), at}, Result: &words[i]}
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return domain.OPStackFeeParams{}, err
	}
	if err := throttledBatch(elems); err != nil {
		return domain.OPStackFeeParams{}, err
	}
	for i, elem := range elems {
		if elem.Error != nil {
			return domain.OPStackFeeParams{}, fmt.Errorf("L1Block slot %d at %s: %w", slots[i], at, elem.Error)
		}
		if len(words[i]) != 32 {
			return domain.OPStackFeeParams{}, fmt.Errorf("L1Block slot %d at %s: %d bytes, want a 32-byte word", slots[i], at, len(words[i]))
		}
	}
	// The scalars word packs, from its low end: the sequence number (8 bytes), the blob base
	// fee scalar (4), the base fee scalar (4).
	scalars := words[1]
	return domain.OPStackFeeParams{
		L1BaseFee:         new(big.Int).SetBytes(words[0]),
		BlobBaseFee:       new(big.Int).SetBytes(words[2]),
		BaseFeeScalar:     binary.BigEndian.Uint32(scalars[16:20]),
		BlobBaseFeeScalar: binary.BigEndian.Uint32(scalars[20:24]),
	}, nil
}

// fillL1Fees computes the L1 data fee of each receipt that lacks one, on an OP-stack chain:
// the transaction's bytes as sent, priced at its block's L1 prices. Nothing to do on other
// chains, or when the node reported every fee.
//
// The error is the call's (no answer at all). Each receipt whose fee could not be had has its
// own error in failed, by position: that receipt alone waits for a later look-up. A node that
// no longer holds the state of the receipt's block (anvil keeps a few hundred blocks', a
// pruned node 128) never will: that fee stays unknown (nil, left out of the fee recorded and
// the API's l1Fee), and the receipt is not held back for it.
func (c *RPCChain) fillL1Fees(ctx context.Context, receipts []*services.Receipt) (failed []error, err error) {
	if !c.opStack {
		return nil, nil
	}
	var missing []int
	for i, r := range receipts {
		if r != nil && r.L1Fee == nil {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return nil, nil
	}
	raws := make([]hexutil.Bytes, len(missing))
	elems := make([]rpc.BatchElem, len(missing))
	for j, i := range missing {
		elems[j] = rpc.BatchElem{Method: "eth_getRawTransactionByHash", Args: []any{receipts[i].TxHash}, Result: &raws[j]}
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return nil, err
	}
	if err := throttledBatch(elems); err != nil {
		return nil, err
	}
	failed = make([]error, len(receipts))
	params := map[uint64]domain.OPStackFeeParams{}
	paramsErr := map[uint64]error{}
	for j, i := range missing {
		r := receipts[i]
		if elems[j].Error != nil {
			failed[i] = fmt.Errorf("raw transaction %s for its L1 fee: %w", r.TxHash, elems[j].Error)
			continue
		}
		if len(raws[j]) == 0 {
			failed[i] = fmt.Errorf("raw transaction %s for its L1 fee: the node does not have it", r.TxHash)
			continue
		}
		p, ok := params[r.BlockNumber]
		if !ok && paramsErr[r.BlockNumber] == nil {
			var err error
			if p, err = c.OPStackFeeParams(ctx, new(big.Int).SetUint64(r.BlockNumber)); err != nil {
				paramsErr[r.BlockNumber] = fmt.Errorf("L1 prices of block %d: %w", r.BlockNumber, err)
			} else {
				params[r.BlockNumber], ok = p, true
			}
		}
		switch {
		case ok:
			r.L1Fee = p.L1Fee(raws[j])
		case stateGone(paramsErr[r.BlockNumber]):
			// Unknown for good: the receipt goes on without it.
		default:
			failed[i] = paramsErr[r.BlockNumber]
		}
	}
	return failed, nil
}

// stateGone: the node answered that it no longer holds the state of the block asked about
// (geth and op-geth: "historical state ... is not available", "missing trie node"; anvil:
// "BlockOutOfRange" / "historic state"; erigon and reth: "pruned").
func stateGone(err error) bool {
	if err == nil {
		return false
	}
	msg := strings.ToLower(err.Error())
	for _, phrase := range []string{"historical state", "historic state", "missing trie node", "blockoutofrange", "pruned", "state is not available", "state not available"} {
		if strings.Contains(msg, phrase) {
			return true
		}
	}
	return false
}
