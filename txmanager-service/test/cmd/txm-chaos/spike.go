package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
)

// burnerCode is creation code that loops until its gas runs out: one transaction of it
// fills as much of a block as its gas limit says.
var burnerCode = []byte{0x5b, 0x60, 0x00, 0x56} // JUMPDEST PUSH1 0 JUMP

// spikeResult is what a base-fee spike did.
type spikeResult struct {
	startBaseFee, peakBaseFee *big.Int
	blocks                    int
}

// multiple is peak / start, rounded down.
func (r spikeResult) multiple() int {
	if r.startBaseFee == nil || r.startBaseFee.Sign() == 0 || r.peakBaseFee == nil {
		return 0
	}
	return int(new(big.Int).Quo(r.peakBaseFee, r.startBaseFee).Int64())
}

func (r spikeResult) String() string {
	return fmt.Sprintf("base fee %s -> %s wei (%dx) over %d full blocks", r.startBaseFee, r.peakBaseFee, r.multiple(), r.blocks)
}

// spikeBaseFee fills block after block with one high-tip burner transaction of 95% of the
// block's gas (EIP-1559 raises the base fee by up to 12.5% per full block) until the base
// fee is at least factor times what it was, as a fee market does when a popular mint or a
// liquidation wave arrives. Transactions priced for the old base fee cannot be mined until
// re-priced. The spammer goes straight to the node, not through the service's endpoints.
func spikeBaseFee(ctx context.Context, nodeURL string, key *ecdsa.PrivateKey, factor int64, limit time.Duration) (spikeResult, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	eth, err := ethclient.DialContext(ctx, nodeURL)
	if err != nil {
		return spikeResult{}, err
	}
	defer eth.Close()
	chainID, err := eth.ChainID(ctx)
	if err != nil {
		return spikeResult{}, err
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	nonce, err := eth.PendingNonceAt(ctx, from)
	if err != nil {
		return spikeResult{}, err
	}
	head, err := eth.HeaderByNumber(ctx, nil)
	if err != nil {
		return spikeResult{}, err
	}
	if head.BaseFee == nil {
		return spikeResult{}, fmt.Errorf("block %d has no base fee", head.Number)
	}
	res := spikeResult{startBaseFee: head.BaseFee, peakBaseFee: head.BaseFee}
	target := new(big.Int).Mul(head.BaseFee, big.NewInt(factor))
	signer := types.LatestSignerForChainID(chainID)
	// The tip outbids the load's transactions for block space; the cap leaves room for the
	// base fee to climb while a spam transaction waits.
	tip := big.NewInt(20 * params.GWei)
	feeCap := new(big.Int).Add(new(big.Int).Mul(target, big.NewInt(4)), tip)
	send := func(gasLimit uint64) (*types.Transaction, error) {
		tx, err := types.SignNewTx(key, signer, &types.DynamicFeeTx{
			ChainID: chainID, Nonce: nonce, Gas: gasLimit * 95 / 100, GasTipCap: tip, GasFeeCap: feeCap, Data: burnerCode,
		})
		if err != nil {
			return nil, err
		}
		if err := eth.SendTransaction(ctx, tx); err != nil {
			return nil, fmt.Errorf("spam at nonce %d: %w", nonce, err)
		}
		nonce++
		return tx, nil
	}
	// Two in flight: a block holds only one (each takes 95% of it), so the other is always
	// waiting for the next block and no block goes by without one.
	var inFlight []*types.Transaction
	for range 2 {
		tx, err := send(head.GasLimit)
		if err != nil {
			return res, err
		}
		inFlight = append(inFlight, tx)
	}
	for res.peakBaseFee.Cmp(target) < 0 {
		if _, err := waitMined(ctx, eth, inFlight[0]); err != nil {
			return res, err
		}
		res.blocks++
		if head, err = eth.HeaderByNumber(ctx, nil); err != nil {
			return res, err
		}
		if head.BaseFee.Cmp(res.peakBaseFee) > 0 {
			res.peakBaseFee = head.BaseFee
		}
		tx, err := send(head.GasLimit)
		if err != nil {
			return res, err
		}
		inFlight = append(inFlight[1:], tx)
	}
	return res, nil
}

// waitMined waits until tx has a receipt.
func waitMined(ctx context.Context, eth *ethclient.Client, tx *types.Transaction) (*types.Receipt, error) {
	for {
		receipt, err := eth.TransactionReceipt(ctx, tx.Hash())
		if err == nil {
			return receipt, nil
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return nil, fmt.Errorf("spam %s not mined: %w", tx.Hash(), err)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
