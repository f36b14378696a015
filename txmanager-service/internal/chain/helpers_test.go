package chain_test

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

const transferGas = 21_000

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newSimulated(t *testing.T, cfg chain.SimulatedConfig) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(cfg)
	if err != nil {
		t.Fatalf("NewSimulated: %v", err)
	}
	t.Cleanup(func() {
		if err := sim.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sim
}

type txParams struct {
	nonce  uint64
	to     *common.Address // nil: contract creation
	value  *big.Int
	gas    uint64
	feeCap *big.Int
	tipCap *big.Int
	data   []byte
}

// signTx signs an EIP-1559 transaction for the simulated chain and returns it with its
// raw encoding, which is what SendRawTransaction takes.
func signTx(t *testing.T, key *ecdsa.PrivateKey, p txParams) (*types.Transaction, []byte) {
	t.Helper()
	chainID := big.NewInt(chain.SimulatedChainID)
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(chainID), &types.DynamicFeeTx{
		ChainID:   chainID,
		Nonce:     p.nonce,
		To:        p.to,
		Value:     p.value,
		Gas:       p.gas,
		GasFeeCap: p.feeCap,
		GasTipCap: p.tipCap,
		Data:      p.data,
	})
	if err != nil {
		t.Fatalf("sign: %v", err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return tx, raw
}

// transfer is a 1 wei transfer priced comfortably above the current base fee.
func transfer(t *testing.T, sim *chain.SimulatedChain, key *ecdsa.PrivateKey, nonce uint64) (*types.Transaction, []byte) {
	t.Helper()
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	return signTx(t, key, txParams{
		nonce:  nonce,
		to:     &to,
		value:  big.NewInt(1),
		gas:    transferGas,
		feeCap: big.NewInt(10 * params.GWei),
		tipCap: big.NewInt(params.GWei),
	})
}

func sendRaw(t *testing.T, ctx context.Context, c *chain.SimulatedChain, raw []byte) {
	t.Helper()
	if err := c.SendRawTransaction(ctx, raw); err != nil {
		t.Fatalf("SendRawTransaction: %v", err)
	}
}

func mustReceipt(t *testing.T, ctx context.Context, c services.Chain, hash common.Hash) *services.Receipt {
	t.Helper()
	results, err := c.TransactionReceipts(ctx, []common.Hash{hash})
	if err != nil {
		t.Fatalf("TransactionReceipts: %v", err)
	}
	if results[0].Err != nil || results[0].Receipt == nil {
		t.Fatalf("receipt of %s: receipt %v, err %v", hash, results[0].Receipt, results[0].Err)
	}
	return results[0].Receipt
}

// deployCode wraps runtime in init code that copies it to memory and returns it:
// PUSH1 len PUSH1 12 PUSH1 0 CODECOPY PUSH1 len PUSH1 0 RETURN, then runtime.
func deployCode(runtime []byte) []byte {
	n := byte(len(runtime))
	init := []byte{0x60, n, 0x60, 0x0c, 0x60, 0x00, 0x39, 0x60, n, 0x60, 0x00, 0xf3}
	return append(init, runtime...)
}

// deployContract mines a contract creation and returns the contract address.
func deployContract(t *testing.T, ctx context.Context, sim *chain.SimulatedChain, key *ecdsa.PrivateKey, runtime []byte) common.Address {
	t.Helper()
	from := crypto.PubkeyToAddress(key.PublicKey)
	nonce, err := sim.PendingNonceAt(ctx, from)
	if err != nil {
		t.Fatalf("PendingNonceAt: %v", err)
	}
	tx, raw := signTx(t, key, txParams{
		nonce:  nonce,
		gas:    200_000,
		feeCap: big.NewInt(10 * params.GWei),
		tipCap: big.NewInt(params.GWei),
		data:   deployCode(runtime),
	})
	sendRaw(t, ctx, sim, raw)
	sim.Commit()
	receipt := mustReceipt(t, ctx, sim, tx.Hash())
	if receipt.Status != types.ReceiptStatusSuccessful || receipt.ContractAddress == nil {
		t.Fatalf("deployment failed: status %d, address %v", receipt.Status, receipt.ContractAddress)
	}
	return *receipt.ContractAddress
}

// waitForTxIndex waits until the node answers receipt look-ups for unknown hashes with
// null. geth reports "transaction indexing is in progress" instead until its background
// indexer has caught up with the head, and on a chain still at genesis it never starts, so
// callers Commit at least one block first.
// pendingNonceSettles reads the account's pending nonce until it is want or 5 s pass: the
// node's pool takes a sent transaction in on its own loop, so the nonce it reports can
// trail the send by a moment on a loaded machine.
func pendingNonceSettles(ctx context.Context, c services.Chain, account common.Address, want uint64) (uint64, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		pending, err := c.PendingNonceAt(ctx, account)
		if err != nil || pending == want || time.Now().After(deadline) {
			return pending, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitForTxIndex(t *testing.T, ctx context.Context, c services.Chain) {
	t.Helper()
	probe := []common.Hash{common.HexToHash("0x7e57")}
	deadline := time.Now().Add(5 * time.Second)
	for {
		results, err := c.TransactionReceipts(ctx, probe)
		if err != nil {
			t.Fatalf("TransactionReceipts: %v", err)
		}
		if results[0].Err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("transaction index not ready: %v", results[0].Err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
