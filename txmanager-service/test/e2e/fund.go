package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
)

// FundAccounts sends amount wei to each address from the dev node's prefunded account and
// waits until every transfer is mined successfully. geth --dev keeps that account
// (eth_accounts[0]) unlocked, so the node signs with eth_sendTransaction and the suite
// never needs its key.
func FundAccounts(ctx context.Context, url string, addrs []common.Address, amount *big.Int) error {
	client, err := rpc.DialContext(ctx, url)
	if err != nil {
		return fmt.Errorf("fund: dial %s: %w", url, err)
	}
	defer client.Close()
	var accounts []common.Address
	if err := client.CallContext(ctx, &accounts, "eth_accounts"); err != nil {
		return fmt.Errorf("fund: eth_accounts: %w", err)
	}
	if len(accounts) == 0 {
		return errors.New("fund: the node has no unlocked account (is it running with --dev?)")
	}
	funder := accounts[0]
	// Each transfer names its nonce: geth takes a missing one from its pool, which learns of
	// the previous transfer on its own loop, so sends in quick succession could be given the
	// same nonce and refused as an underpriced replacement.
	var next hexutil.Uint64
	if err := client.CallContext(ctx, &next, "eth_getTransactionCount", funder, "pending"); err != nil {
		return fmt.Errorf("fund: nonce of %s: %w", funder, err)
	}
	hashes := make([]common.Hash, len(addrs))
	for i, to := range addrs {
		tx := map[string]any{"from": funder, "to": to, "value": (*hexutil.Big)(amount), "nonce": next + hexutil.Uint64(i)}
		if err := client.CallContext(ctx, &hashes[i], "eth_sendTransaction", tx); err != nil {
			return fmt.Errorf("fund %s from %s: eth_sendTransaction: %w", to, funder, err)
		}
	}
	eth := ethclient.NewClient(client)
	for i, hash := range hashes {
		receipt, err := WaitReceipt(ctx, eth, hash)
		if err != nil {
			return fmt.Errorf("fund %s: %w", addrs[i], err)
		}
		if receipt.Status != types.ReceiptStatusSuccessful {
			return fmt.Errorf("fund %s: transfer %s reverted", addrs[i], hash)
		}
	}
	return nil
}

// WaitReceipt polls until the transaction is mined or ctx ends.
func WaitReceipt(ctx context.Context, eth *ethclient.Client, hash common.Hash) (*types.Receipt, error) {
	for {
		receipt, err := eth.TransactionReceipt(ctx, hash)
		if err == nil {
			return receipt, nil
		}
		if !errors.Is(err, ethereum.NotFound) && !txIndexingInProgress(err) {
			return nil, fmt.Errorf("receipt of %s: %w", hash, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("receipt of %s: %w", hash, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// txIndexingInProgress reports geth's answer to a receipt look-up while its background
// transaction indexer catches up with the head, as on a fresh --dev node in its first
// blocks: the receipt may exist, so, like "not found", it means ask again.
func txIndexingInProgress(err error) bool {
	var dataErr rpc.DataError
	return errors.As(err, &dataErr) && dataErr.ErrorData() == "transaction indexing is in progress"
}
