package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"os"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/runcost"
)

const (
	sendBatch   = 500 // raw transactions per eth_sendRawTransaction batch
	sendWorkers = 4
)

// runBaseline pre-signs transfers transfers spread over keys (round robin, so nonces reach
// the node in order per signer), then measures first send -> every transfer confirmed.
func runBaseline(ctx context.Context, url string, gethPID int, keys []*ecdsa.PrivateKey, transfers int, confirmations uint64,
	profileNode func(context.Context, string) func(),
) (measurement, error) {
	client, err := rpc.DialContext(ctx, url)
	if err != nil {
		return measurement{}, err
	}
	defer client.Close()
	eth := ethclient.NewClient(client)
	chainID, err := eth.ChainID(ctx)
	if err != nil {
		return measurement{}, err
	}
	head, err := eth.HeaderByNumber(ctx, nil)
	if err != nil {
		return measurement{}, err
	}
	// The service's own formula: room for the base fee to double, plus a 1 gwei tip.
	tip := big.NewInt(params.GWei)
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), tip)
	signer := types.LatestSignerForChainID(chainID)
	raws := make([]hexutil.Bytes, transfers)
	hashes := make([]common.Hash, transfers)
	to := e2e.Recipient()
	for i := range transfers {
		tx, err := types.SignNewTx(keys[i%len(keys)], signer, &types.DynamicFeeTx{
			ChainID: chainID, Nonce: uint64(i / len(keys)), To: &to, Value: big.NewInt(1), Gas: 21_000,
			GasTipCap: tip, GasFeeCap: feeCap,
		})
		if err != nil {
			return measurement{}, err
		}
		if raws[i], err = tx.MarshalBinary(); err != nil {
			return measurement{}, err
		}
		hashes[i] = tx.Hash()
	}

	stopNodeProfile := profileNode(ctx, fmt.Sprintf("baseline-%d", len(keys)))
	account := runcost.StartCPUAccount(runcost.Process{Name: "geth", PID: gethPID}, runcost.Process{Name: "sender", PID: os.Getpid()})
	// The head before the first send: a push of thousands can outlast several blocks, and
	// the first of them may already hold transfers.
	start, err := eth.BlockNumber(ctx)
	if err != nil {
		return measurement{}, err
	}
	started := time.Now()
	if err := pushAll(ctx, client, raws); err != nil {
		return measurement{}, err
	}
	m := measurement{transfers: transfers, accepted: time.Since(started)}
	blocks, err := waitConfirmed(ctx, client, eth, hashes, confirmations, start)
	if err != nil {
		return m, err
	}
	m.confirmed, m.blocks = time.Since(started), blocks
	m.cpu = account.Finish()
	fmt.Printf("    %s\n", m.cpu)
	stopNodeProfile()
	return m, nil
}

// pushAll sends the raw transactions in batches, sendWorkers batches at a time, in order:
// batch k+sendWorkers starts only after batch k was answered, so a signer's nonces never
// reach the node far out of order. A transaction the node refuses is an error.
func pushAll(ctx context.Context, client *rpc.Client, raws []hexutil.Bytes) error {
	batches := make(chan []hexutil.Bytes)
	errs := make(chan error, sendWorkers)
	var wg sync.WaitGroup
	for range sendWorkers {
		wg.Go(func() {
			for batch := range batches {
				elems := make([]rpc.BatchElem, len(batch))
				for i, raw := range batch {
					elems[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{raw}, Result: new(common.Hash)}
				}
				err := client.BatchCallContext(ctx, elems)
				for _, e := range elems {
					err = errors.Join(err, e.Error)
				}
				if err != nil {
					errs <- fmt.Errorf("eth_sendRawTransaction batch: %w", err)
					return
				}
			}
		})
	}
	var sendErr error
	for start := 0; start < len(raws) && sendErr == nil; start += sendBatch {
		select {
		case batches <- raws[start:min(start+sendBatch, len(raws))]:
		case sendErr = <-errs:
		}
	}
	close(batches)
	wg.Wait()
	close(errs)
	for err := range errs {
		sendErr = errors.Join(sendErr, err)
	}
	return sendErr
}

// waitConfirmed follows the head from start and reads each new block's transaction hashes until every
// hash has been mined, then waits until the head gives the last of those blocks the
// confirmations (head - block + 1, as the service counts). Like the service, it asks only
// when the head moves: polling thousands of receipts in a loop would slow the node it
// measures. It returns how many blocks the transfers landed in.
func waitConfirmed(ctx context.Context, client *rpc.Client, eth *ethclient.Client, hashes []common.Hash, confirmations, start uint64) (int, error) {
	want := make(map[common.Hash]bool, len(hashes))
	for _, h := range hashes {
		want[h] = true
	}
	// Transfers may already be in the start head's block.
	next, blocks, last := start, 0, uint64(0)
	for len(want) > 0 {
		head, err := eth.BlockNumber(ctx)
		if err != nil {
			return 0, err
		}
		for ; next <= head; next++ {
			var block struct {
				Transactions []common.Hash `json:"transactions"`
			}
			if err := client.CallContext(ctx, &block, "eth_getBlockByNumber", hexutil.EncodeUint64(next), false); err != nil {
				return 0, fmt.Errorf("block %d: %w", next, err)
			}
			found := 0
			for _, h := range block.Transactions {
				if want[h] {
					delete(want, h)
					found++
				}
			}
			if found > 0 {
				blocks++
				last = next
			}
		}
		if len(want) > 0 {
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return 0, fmt.Errorf("%d transfers not mined: %w", len(want), err)
			}
		}
	}
	for {
		head, err := eth.BlockNumber(ctx)
		if err != nil {
			return 0, err
		}
		if head+1 >= last+confirmations {
			return blocks, nil
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
