package e2e

import (
	"context"
	"fmt"
	"math/big"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
)

// ExpectedTx is what the service reported for one transaction; the chain must agree.
type ExpectedTx struct {
	TxID        string
	Signer      common.Address
	Nonce       uint64
	TxHash      common.Hash
	BlockNumber uint64
}

// CheckOnChain asks the node about every transaction, parallel at a time, and returns one
// entry per transaction: nil when the chain holds it mined and successful, from Signer,
// with Nonce, in BlockNumber; otherwise what differs.
func CheckOnChain(ctx context.Context, eth *ethclient.Client, txs []ExpectedTx, parallel int) ([]error, error) {
	chainID, err := eth.ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("chain id: %w", err)
	}
	signer := types.LatestSignerForChainID(chainID)
	results := make([]error, len(txs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(parallel, 1) {
		wg.Go(func() {
			for i := range next {
				results[i] = checkOne(ctx, eth, signer, txs[i])
			}
		})
	}
	for i := range txs {
		next <- i
	}
	close(next)
	wg.Wait()
	return results, ctx.Err()
}

func checkOne(ctx context.Context, eth *ethclient.Client, signer types.Signer, want ExpectedTx) error {
	tx, pending, err := eth.TransactionByHash(ctx, want.TxHash)
	if err != nil {
		return fmt.Errorf("tx %s (%s): eth_getTransactionByHash: %w", want.TxID, want.TxHash, err)
	}
	if pending {
		return fmt.Errorf("tx %s (%s): still pending on chain", want.TxID, want.TxHash)
	}
	from, err := types.Sender(signer, tx)
	if err != nil {
		return fmt.Errorf("tx %s (%s): sender: %w", want.TxID, want.TxHash, err)
	}
	if from != want.Signer {
		return fmt.Errorf("tx %s (%s): from %s on chain, service says %s", want.TxID, want.TxHash, from, want.Signer)
	}
	if tx.Nonce() != want.Nonce {
		return fmt.Errorf("tx %s (%s): nonce %d on chain, service says %d", want.TxID, want.TxHash, tx.Nonce(), want.Nonce)
	}
	receipt, err := eth.TransactionReceipt(ctx, want.TxHash)
	if err != nil {
		return fmt.Errorf("tx %s (%s): receipt: %w", want.TxID, want.TxHash, err)
	}
	if receipt.Status != types.ReceiptStatusSuccessful {
		return fmt.Errorf("tx %s (%s): reverted on chain", want.TxID, want.TxHash)
	}
	if receipt.BlockNumber.Cmp(new(big.Int).SetUint64(want.BlockNumber)) != 0 {
		return fmt.Errorf("tx %s (%s): in block %s on chain, service says %d", want.TxID, want.TxHash, receipt.BlockNumber, want.BlockNumber)
	}
	return nil
}
