package chain_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestSimulatedFundsDeterministicDevAccounts(t *testing.T) {
	extra := common.HexToAddress("0x00000000000000000000000000000000000A11CE")
	balance := big.NewInt(5 * params.Ether)
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 3, Balance: balance, ExtraFunded: []common.Address{extra}})
	ctx := testContext(t)

	addrs := sim.DevAddresses()
	keys := sim.DevKeys()
	if len(addrs) != 3 || len(keys) != 3 {
		t.Fatalf("got %d addresses and %d keys, want 3 each", len(addrs), len(keys))
	}
	for i, addr := range addrs {
		want, err := chain.DevKey(i)
		if err != nil {
			t.Fatal(err)
		}
		if got := crypto.PubkeyToAddress(want.PublicKey); got != addr {
			t.Errorf("dev address %d = %s, want %s derived from DevKey", i, addr, got)
		}
		if got := crypto.PubkeyToAddress(keys[i].PublicKey); got != addr {
			t.Errorf("DevKeys()[%d] is for %s, want %s", i, got, addr)
		}
	}
	for _, addr := range append(addrs, extra) {
		got, err := sim.Backend().Client().BalanceAt(ctx, addr, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Cmp(balance) != 0 {
			t.Errorf("balance of %s = %s, want %s", addr, got, balance)
		}
	}
}

func TestSimulatedDefaultsTenAccountsWith1e24Wei(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{})
	ctx := testContext(t)

	addrs := sim.DevAddresses()
	if len(addrs) != 10 {
		t.Fatalf("got %d dev accounts, want 10", len(addrs))
	}
	want := new(big.Int).Exp(big.NewInt(10), big.NewInt(24), nil)
	got, err := sim.Backend().Client().BalanceAt(ctx, addrs[9], nil)
	if err != nil {
		t.Fatal(err)
	}
	if got.Cmp(want) != 0 {
		t.Errorf("balance = %s, want %s", got, want)
	}
	id, err := sim.ChainID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.Int64() != chain.SimulatedChainID {
		t.Errorf("ChainID = %s, want %d", id, chain.SimulatedChainID)
	}
}

func TestSendTransferThenFindReceipt(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	key, from := sim.DevKeys()[0], sim.DevAddresses()[0]

	tx, raw := transfer(t, sim, key, 0)
	sendRaw(t, ctx, sim, raw)

	if pending, err := pendingNonceSettles(ctx, sim, from, 1); err != nil || pending != 1 {
		t.Fatalf("PendingNonceAt after send = %d, %v; want 1", pending, err)
	}
	mined, err := sim.NonceAt(ctx, from)
	if err != nil || mined != 0 {
		t.Fatalf("NonceAt before commit = %d, %v; want 0", mined, err)
	}

	blockHash := sim.Commit()

	mined, err = sim.NonceAt(ctx, from)
	if err != nil || mined != 1 {
		t.Fatalf("NonceAt after commit = %d, %v; want 1", mined, err)
	}
	waitForTxIndex(t, ctx, sim)
	unknown := common.HexToHash("0x1234")
	results, err := sim.TransactionReceipts(ctx, []common.Hash{tx.Hash(), unknown})
	if err != nil {
		t.Fatalf("TransactionReceipts: %v", err)
	}
	if len(results) != 2 {
		t.Fatalf("got %d results, want 2", len(results))
	}
	found := results[0]
	if found.Err != nil || found.Receipt == nil {
		t.Fatalf("receipt of sent tx: %+v", found)
	}
	r := found.Receipt
	if r.TxHash != tx.Hash() || r.Status != 1 || r.BlockHash != blockHash || r.BlockNumber != 1 || r.GasUsed != transferGas {
		t.Errorf("receipt = %+v, want tx %s status 1 in block 1 %s using %d gas", r, tx.Hash(), blockHash, transferGas)
	}
	if r.EffectiveGasPrice == nil || r.EffectiveGasPrice.Sign() <= 0 {
		t.Errorf("EffectiveGasPrice = %v, want positive", r.EffectiveGasPrice)
	}
	if r.ContractAddress != nil {
		t.Errorf("ContractAddress = %s for a transfer, want nil", r.ContractAddress)
	}
	if results[1].Receipt != nil || results[1].Err != nil {
		t.Errorf("unknown hash: got %+v, want nil receipt and nil error", results[1])
	}
}

// A node whose transaction index is still being built cannot tell "no such transaction"
// from "not indexed yet"; the adapter must pass that on as an error, not as "not mined".
// geth's indexer only starts with the first block after genesis, which makes this state
// reproducible on a fresh simulated chain.
func TestReceiptLookupWhileIndexingIsAnErrorNotAMiss(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)

	results, err := sim.TransactionReceipts(ctx, []common.Hash{common.HexToHash("0x1234")})
	if err != nil {
		t.Fatalf("TransactionReceipts: %v", err)
	}
	if results[0].Receipt != nil {
		t.Fatalf("receipt for an unknown hash: %+v", results[0].Receipt)
	}
	if results[0].Err == nil || !strings.Contains(results[0].Err.Error(), "transaction indexing is in progress") {
		t.Errorf("Err = %v, want the node's indexing-in-progress error", results[0].Err)
	}
}

func TestSendRawTransactionClassifiesNodeErrors(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 4})
	ctx := testContext(t)
	keys := sim.DevKeys()
	unfunded, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")

	tests := []struct {
		name string
		// send returns the raw transaction whose submission is under test, after any
		// set-up sends and commits.
		send        func(t *testing.T) []byte
		want        error
		wantMessage string // what the node says, kept in Error()
	}{
		{
			name: "same transaction again while pending",
			send: func(t *testing.T) []byte {
				_, raw := transfer(t, sim, keys[0], 0)
				sendRaw(t, ctx, sim, raw)
				return raw
			},
			want:        services.ErrKnownTransaction,
			wantMessage: "already known",
		},
		{
			name: "same transaction again after it was mined",
			send: func(t *testing.T) []byte {
				_, raw := transfer(t, sim, keys[1], 0)
				sendRaw(t, ctx, sim, raw)
				sim.Commit()
				// The pool drops mined transactions in a background reset; until then a
				// resend is "already known". The next Commit waits for that reset.
				sim.Commit()
				return raw
			},
			want:        services.ErrNonceTooLow,
			wantMessage: "nonce too low",
		},
		{
			name: "replacement with too small a fee bump",
			send: func(t *testing.T) []byte {
				_, raw := transfer(t, sim, keys[2], 0)
				sendRaw(t, ctx, sim, raw)
				_, replacement := signTx(t, keys[2], txParams{
					nonce:  0,
					to:     &to,
					value:  big.NewInt(2),
					gas:    transferGas,
					feeCap: big.NewInt(10*params.GWei + 1),
					tipCap: big.NewInt(params.GWei + 1),
				})
				return replacement
			},
			want:        services.ErrUnderpriced,
			wantMessage: "replacement transaction underpriced",
		},
		{
			name: "tip below the pool minimum",
			send: func(t *testing.T) []byte {
				_, raw := signTx(t, keys[3], txParams{
					nonce:  0,
					to:     &to,
					gas:    transferGas,
					feeCap: big.NewInt(10 * params.GWei),
					tipCap: big.NewInt(0),
				})
				return raw
			},
			want:        services.ErrUnderpriced,
			wantMessage: "transaction gas price below minimum",
		},
		{
			name: "sender without funds",
			send: func(t *testing.T) []byte {
				_, raw := signTx(t, unfunded, txParams{
					nonce:  0,
					to:     &to,
					gas:    transferGas,
					feeCap: big.NewInt(10 * params.GWei),
					tipCap: big.NewInt(params.GWei),
				})
				return raw
			},
			want:        services.ErrInsufficientFunds,
			wantMessage: "insufficient funds for gas * price + value",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := sim.SendRawTransaction(ctx, tc.send(t))
			t.Logf("node said: %v", err)
			if !errors.Is(err, tc.want) {
				t.Fatalf("error %v does not match %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.wantMessage) {
				t.Errorf("error %q lost the node's message %q", err, tc.wantMessage)
			}
		})
	}
}

// geth admits a transaction whose fee cap is below the base fee and parks it until the base
// fee falls, so the service sees no error and must rely on receipts to notice it is stuck.
func TestFeeCapBelowBaseFeeIsAcceptedButNotMined(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")

	fees, err := sim.SuggestFees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	feeCap := big.NewInt(1)
	if feeCap.Cmp(fees.BaseFee) >= 0 {
		t.Fatalf("base fee %s is not above the test's fee cap", fees.BaseFee)
	}
	tx, raw := signTx(t, sim.DevKeys()[0], txParams{nonce: 0, to: &to, gas: transferGas, feeCap: feeCap, tipCap: feeCap})
	if err := sim.SendRawTransaction(ctx, raw); err != nil {
		t.Fatalf("SendRawTransaction: %v (the node used to accept this; has the pool policy changed?)", err)
	}
	sim.Commit()
	waitForTxIndex(t, ctx, sim)
	results, err := sim.TransactionReceipts(ctx, []common.Hash{tx.Hash()})
	if err != nil || results[0].Err != nil {
		t.Fatalf("TransactionReceipts: %v / %v", err, results[0].Err)
	}
	if results[0].Receipt != nil {
		t.Errorf("transaction with fee cap %s below base fee %s was mined", feeCap, fees.BaseFee)
	}
	if pending, err := pendingNonceSettles(ctx, sim, sim.DevAddresses()[0], 1); err != nil || pending != 1 {
		t.Errorf("PendingNonceAt = %d, %v; want 1 (the transaction waits in the pool)", pending, err)
	}
}

func TestSuggestFeesReadsBaseFeeAndTip(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	sim.Commit()

	before := sim.RequestCount()
	fees, err := sim.SuggestFees(ctx)
	if err != nil {
		t.Fatalf("SuggestFees: %v", err)
	}
	if fees.BaseFee == nil || fees.BaseFee.Sign() <= 0 {
		t.Errorf("BaseFee = %v, want positive", fees.BaseFee)
	}
	if fees.TipCap == nil || fees.TipCap.Sign() <= 0 {
		t.Errorf("TipCap = %v, want positive", fees.TipCap)
	}
	if got := sim.RequestCount() - before; got != 1 {
		t.Errorf("SuggestFees cost %d requests, want 1 batch", got)
	}
}

func TestHeadersByNumberMatchesLatestAndStopsAtHead(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	for range 3 {
		sim.Commit()
	}

	latest, err := sim.LatestHeader(ctx)
	if err != nil {
		t.Fatalf("LatestHeader: %v", err)
	}
	if latest.Number != 3 {
		t.Fatalf("latest height = %d, want 3", latest.Number)
	}
	heights := []uint64{0, 1, 2, 3, 4, 1000}
	headers, err := sim.HeadersByNumber(ctx, heights)
	if err != nil {
		t.Fatalf("HeadersByNumber: %v", err)
	}
	if len(headers) != len(heights) {
		t.Fatalf("got %d headers, want %d", len(headers), len(heights))
	}
	for i, height := range heights[:4] {
		if headers[i] == nil || headers[i].Number != height {
			t.Fatalf("header %d = %+v, want height %d", i, headers[i], height)
		}
		if i > 0 && headers[i].ParentHash != headers[i-1].Hash {
			t.Errorf("header %d parent %s, want %s", height, headers[i].ParentHash, headers[i-1].Hash)
		}
	}
	if *headers[3] != *latest {
		t.Errorf("header at head = %+v, LatestHeader = %+v", headers[3], latest)
	}
	for i := 4; i < len(heights); i++ {
		if headers[i] != nil {
			t.Errorf("height %d beyond head returned %+v, want nil", heights[i], headers[i])
		}
	}
}

func TestFinalizedHeaderOnSimulatedChain(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	for range 3 {
		sim.Commit()
	}
	finalized, err := sim.FinalizedHeader(ctx)
	if err != nil {
		t.Fatalf("FinalizedHeader: %v", err)
	}
	// The simulated beacon finalises at 32-block epoch boundaries, so below 32 blocks
	// the finalized block is genesis.
	genesis, err := sim.HeadersByNumber(ctx, []uint64{0})
	if err != nil {
		t.Fatal(err)
	}
	if *finalized != *genesis[0] {
		t.Errorf("finalized = %+v, want genesis %+v", finalized, genesis[0])
	}
}

func TestEstimateGas(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	key, from := sim.DevKeys()[0], sim.DevAddresses()[0]

	// PUSH1 0 PUSH1 0 REVERT: reverts with no data.
	bareRevert := deployContract(t, ctx, sim, key, []byte{0x60, 0x00, 0x60, 0x00, 0xfd})
	reasonRevert := deployContract(t, ctx, sim, key, revertWithReason("nope"))
	recipient := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	unfunded := common.HexToAddress("0x00000000000000000000000000000000000F00d5")
	oneEther := new(big.Int).Exp(big.NewInt(10), big.NewInt(18), nil)
	// PUSH1 1 PUSH1 0 SSTORE STOP: writes a new slot, about 43,000 gas a call.
	storer := deployContract(t, ctx, sim, key, []byte{0x60, 0x01, 0x60, 0x00, 0x55, 0x00})
	// poor holds what 30,000 gas costs at 100 gwei: its allowance at that fee is below
	// what a call to storer needs.
	highFee := big.NewInt(100 * params.GWei)
	poor := fund(t, ctx, sim, key, new(big.Int).Mul(big.NewInt(30_000), highFee))

	tests := []struct {
		name        string
		call        services.CallRequest
		wantGas     uint64
		wantClass   error // nil: success
		wantClasses []error
		wantMessage string
		// wantGasAbove: a success whose estimate is above this (not an exact figure).
		wantGasAbove uint64
	}{
		{name: "plain transfer", call: services.CallRequest{From: from, To: &recipient, Value: big.NewInt(1)}, wantGas: transferGas},
		{name: "revert without reason", call: services.CallRequest{From: from, To: &bareRevert, Value: big.NewInt(1)},
			wantClass: services.ErrExecutionReverted, wantMessage: "execution reverted"},
		{name: "revert with reason string", call: services.CallRequest{From: from, To: &reasonRevert, Value: big.NewInt(1)},
			wantClass: services.ErrExecutionReverted, wantMessage: "execution reverted: nope"},
		{name: "creation code with an invalid opcode", call: services.CallRequest{From: from, Data: []byte{0xfe}},
			wantClass: services.ErrExecutionReverted, wantMessage: "invalid opcode"},
		{name: "value above the balance", call: services.CallRequest{From: unfunded, To: &recipient, Value: oneEther},
			wantClass: services.ErrInsufficientFunds, wantMessage: "insufficient funds"},
		{name: "gas the sender cannot pay at its named fee", call: services.CallRequest{From: unfunded, To: &recipient, Value: big.NewInt(0),
			MaxFeePerGas: big.NewInt(100_000_000_000), MaxPriorityFeePerGas: big.NewInt(1)},
			wantClass: services.ErrInsufficientFunds, wantMessage: "insufficient funds"},
		{name: "a call the sender's funds cap below its need at its named fee", call: services.CallRequest{From: poor, To: &storer, Value: big.NewInt(0),
			MaxFeePerGas: highFee, MaxPriorityFeePerGas: big.NewInt(1)},
			wantClasses: []error{services.ErrExecutionReverted, services.ErrGasCapped}, wantMessage: "gas required exceeds allowance"},
		{name: "the same call without a fee", call: services.CallRequest{From: poor, To: &storer, Value: big.NewInt(0)}, wantGasAbove: 30_000},
		{name: "a call whose named gas is below its intrinsic gas", call: services.CallRequest{From: from, To: &recipient, Data: []byte("some data"), Gas: transferGas},
			wantClasses: []error{services.ErrExecutionReverted, services.ErrGasCapped}, wantMessage: "gas required exceeds allowance"},
	}
	classes := []error{services.ErrExecutionReverted, services.ErrInsufficientFunds, services.ErrGasCapped}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gas, err := sim.EstimateGas(ctx, tc.call)
			if tc.wantClass != nil {
				tc.wantClasses = []error{tc.wantClass}
			}
			if tc.wantClasses == nil {
				if err != nil || (tc.wantGasAbove == 0 && gas != tc.wantGas) || gas <= tc.wantGasAbove {
					t.Fatalf("EstimateGas = %d, %v; want %d", gas, err, tc.wantGas)
				}
				return
			}
			t.Logf("node said: %v", err)
			for _, class := range classes {
				if want := slices.Contains(tc.wantClasses, class); errors.Is(err, class) != want {
					t.Errorf("errors.Is(%v, %v) = %v, want %v", err, class, !want, want)
				}
			}
			if err != nil && !strings.Contains(err.Error(), tc.wantMessage) {
				t.Errorf("error %q lacks %q", err, tc.wantMessage)
			}
		})
	}
}

// fund sends value from key to a new account, seals the block, and returns the account.
func fund(t *testing.T, ctx context.Context, sim *chain.SimulatedChain, key *ecdsa.PrivateKey, value *big.Int) common.Address {
	t.Helper()
	account := crypto.PubkeyToAddress(mustKey(t).PublicKey)
	nonce, err := sim.PendingNonceAt(ctx, crypto.PubkeyToAddress(key.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	tx, raw := signTx(t, key, txParams{nonce: nonce, to: &account, value: value, gas: transferGas, feeCap: big.NewInt(10 * params.GWei), tipCap: big.NewInt(params.GWei)})
	sendRaw(t, ctx, sim, raw)
	sim.Commit()
	if receipt := mustReceipt(t, ctx, sim, tx.Hash()); receipt.Status != types.ReceiptStatusSuccessful {
		t.Fatalf("funding %s failed", account.Hex())
	}
	return account
}

func mustKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// revertWithReason is runtime code that reverts with Error(reason), the ABI encoding
// Solidity's require(false, reason) produces: it copies the encoded payload appended to
// the code into memory and reverts with it.
func revertWithReason(reason string) []byte {
	payload := crypto.Keccak256([]byte("Error(string)"))[:4]
	payload = append(payload, common.LeftPadBytes([]byte{0x20}, 32)...)
	payload = append(payload, common.LeftPadBytes([]byte{byte(len(reason))}, 32)...)
	payload = append(payload, common.RightPadBytes([]byte(reason), 32)...)
	n := byte(len(payload))
	const codeLen = 12
	code := []byte{
		0x60, n, 0x60, codeLen, 0x60, 0x00, 0x39, // CODECOPY(dest 0, offset codeLen, size n)
		0x60, n, 0x60, 0x00, 0xfd, // REVERT(offset 0, size n)
	}
	return append(code, payload...)
}

func TestSendRawTransactionsBatchesAndClassifiesEach(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{})
	key := sim.DevKeys()[0]
	_, first := transfer(t, sim, key, 0)
	_, second := transfer(t, sim, key, 1)
	before := sim.RequestCount()
	errs, err := sim.SendRawTransactions(testContext(t), [][]byte{first, second, first})
	if err != nil {
		t.Fatal(err)
	}
	if sim.RequestCount()-before != 1 {
		t.Fatalf("three sends cost %d requests, want 1 batch", sim.RequestCount()-before)
	}
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], services.ErrKnownTransaction) {
		t.Fatalf("errs = %v, want nil, nil, already known", errs)
	}
}
