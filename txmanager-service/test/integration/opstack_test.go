package integration

import (
	"context"
	"crypto/ecdsa"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// opStackChainID is OP Mainnet's id, the one the OP-stack anvil runs under.
const opStackChainID = 10

// opStackPrices are L1 prices as OP Mainnet's L1Block held them in 2025 (base fee scalar
// 5227, blob base fee scalar 1014213), with the L1 base fee and blob base fee raised so the
// data fee is a visible share of a transfer's cost.
var opStackPrices = domain.OPStackFeeParams{
	L1BaseFee: big.NewInt(30 * params.GWei), BlobBaseFee: big.NewInt(2 * params.GWei),
	BaseFeeScalar: 5227, BlobBaseFeeScalar: 1014213,
}

// startOPStackAnvil starts anvil with the OP-stack's rules (it then charges the L1 data fee
// but reports none in its receipts, and serves no GasPriceOracle code) and writes prices
// into its L1Block predeploy's storage, where every OP-stack node keeps them.
func startOPStackAnvil(t *testing.T, blockTime time.Duration) string {
	t.Helper()
	ctx := context.Background()
	bin, err := e2e.FindAnvil()
	if err != nil {
		t.Fatal(err)
	}
	node, err := e2e.StartAnvil(ctx, e2e.AnvilOptions{Bin: bin, BlockTime: blockTime, ChainID: opStackChainID, Optimism: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Stop() })
	var scalars common.Hash
	binary.BigEndian.PutUint32(scalars[16:20], opStackPrices.BaseFeeScalar)
	binary.BigEndian.PutUint32(scalars[20:24], opStackPrices.BlobBaseFeeScalar)
	for slot, value := range map[int64]common.Hash{
		1: common.BigToHash(opStackPrices.L1BaseFee),
		3: scalars,
		7: common.BigToHash(opStackPrices.BlobBaseFee),
	} {
		if err := e2e.SetStorageAt(ctx, node.URL(), chain.L1BlockAddress, common.BigToHash(big.NewInt(slot)), value); err != nil {
			t.Fatal(err)
		}
	}
	return node.URL()
}

// The L1 data fee the service computes for a node that does not report it is, to the wei,
// what the node charged: call data of every kind (none, incompressible, long runs,
// repeated patterns, mixed) through FastLZ and the Fjord rule, checked against the
// balance anvil's OP-stack EVM took.
func TestOPStackDataFeeMatchesWhatTheNodeCharged(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := startOPStackAnvil(t, 0)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	if err := e2e.SetBalance(ctx, url, from, (*hexutil.Big)(new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether)))); err != nil {
		t.Fatal(err)
	}
	rpcChain, err := chain.DialRPC(ctx, url, chain.WithOPStackFees(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rpcChain.Close)
	prices, err := rpcChain.OPStackFeeParams(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(prices) != fmt.Sprint(opStackPrices) {
		t.Fatalf("L1Block storage read as %+v, want %+v", prices, opStackPrices)
	}
	eth, err := ethclient.DialContext(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)

	r := rand.New(rand.NewPCG(7, 47))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	pattern := func(n int, unit []byte) []byte {
		b := make([]byte, 0, n)
		for len(b) < n {
			b = append(b, unit...)
		}
		return b[:n]
	}
	cases := []struct {
		name string
		data []byte
	}{
		{"transfer", nil},
		{"4-byte call", []byte{0xa9, 0x05, 0x9c, 0xbb}},
		{"ERC-20 transfer shape", append([]byte{0xa9, 0x05, 0x9c, 0xbb}, append(make([]byte, 12), append(random(20), append(make([]byte, 28), 0x0f, 0x42, 0x40, 0x00)...)...)...)},
		{"200 random bytes", random(200)},
		{"1,000 zero bytes", make([]byte, 1000)},
		{"3,000 bytes of a 7-byte pattern", pattern(3000, []byte{1, 2, 3, 4, 5, 6, 7})},
		{"5,000 random bytes", random(5000)},
		{"mixed runs and noise, 12,000 bytes", append(append(random(3000), make([]byte, 4000)...), append(pattern(2000, random(40)), random(3000)...)...)},
		{"runs longer than a match (600 x 0xff)", append(random(10), pattern(600, []byte{0xff})...)},
	}
	signer := types.LatestSignerForChainID(big.NewInt(opStackChainID))
	for nonce, tc := range cases {
		to := common.HexToAddress("0x00000000000000000000000000000000000f00d5")
		// Enough for the calldata floor too (EIP-7623: 40 gas per non-zero byte).
		gas := 21_000 + 40*uint64(len(tc.data)) + 10_000
		tx, err := types.SignNewTx(key, signer, &types.DynamicFeeTx{
			ChainID: big.NewInt(opStackChainID), Nonce: uint64(nonce), Gas: gas, To: &to, Value: big.NewInt(1),
			GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(10 * params.GWei), Data: tc.data,
		})
		if err != nil {
			t.Fatal(err)
		}
		before, err := eth.BalanceAt(ctx, from, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rpcChain.SendRawTransaction(ctx, mustMarshal(t, tx)); err != nil {
			t.Fatalf("%s: send: %v", tc.name, err)
		}
		if err := e2e.Mine(ctx, url); err != nil {
			t.Fatal(err)
		}
		after, err := eth.BalanceAt(ctx, from, nil)
		if err != nil {
			t.Fatal(err)
		}
		results, err := rpcChain.TransactionReceipts(ctx, []common.Hash{tx.Hash()})
		if err != nil || results[0].Err != nil || results[0].Receipt == nil {
			t.Fatalf("%s: receipt: %v %+v", tc.name, err, results)
		}
		receipt := results[0].Receipt
		charged := new(big.Int).Sub(before, after)
		charged.Sub(charged, tx.Value())
		l2 := new(big.Int).Mul(new(big.Int).SetUint64(receipt.GasUsed), receipt.EffectiveGasPrice)
		nodeL1 := new(big.Int).Sub(charged, l2)
		if receipt.L1Fee == nil || receipt.L1Fee.Cmp(nodeL1) != 0 {
			t.Errorf("%s (%d bytes, FastLZ %d): L1 fee recorded %v wei, the node charged %s", tc.name, len(tc.data), domain.FastLZCompressedLen(mustMarshal(t, tx)), receipt.L1Fee, nodeL1)
			continue
		}
		if bound := prices.L1FeeUpperBound(len(mustMarshalUnsigned(t, tx))); bound.Cmp(nodeL1) < 0 {
			t.Errorf("%s: the upper bound %s is below the fee charged %s", tc.name, bound, nodeL1)
		}
		t.Logf("%-40s %6d bytes, FastLZ %6d: L1 fee %s wei = the node's, L2 %s wei", tc.name, len(tc.data), domain.FastLZCompressedLen(mustMarshal(t, tx)), nodeL1, l2)
	}
}

// sendTransferAndMine sends a transfer of 1 wei from key at nonce through rpcChain and has
// the anvil at url mine it in a block of its own.
func sendTransferAndMine(t *testing.T, rpcChain *chain.RPCChain, url string, key *ecdsa.PrivateKey, nonce uint64) common.Hash {
	t.Helper()
	to := common.HexToAddress("0x00000000000000000000000000000000000f00d5")
	tx, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(opStackChainID)), &types.DynamicFeeTx{
		ChainID: big.NewInt(opStackChainID), Nonce: nonce, Gas: 21_000, To: &to, Value: big.NewInt(1),
		GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(10 * params.GWei)})
	if err != nil {
		t.Fatal(err)
	}
	if err := rpcChain.SendRawTransaction(t.Context(), mustMarshal(t, tx)); err != nil {
		t.Fatal(err)
	}
	if err := e2e.Mine(t.Context(), url); err != nil {
		t.Fatal(err)
	}
	return tx.Hash()
}

func mustMarshal(t *testing.T, tx *types.Transaction) []byte {
	t.Helper()
	raw, err := tx.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// mustMarshalUnsigned is tx's envelope without its signature (zero V, R, S), as the
// GasPriceOracle's upper bound is asked with.
func mustMarshalUnsigned(t *testing.T, tx *types.Transaction) []byte {
	t.Helper()
	unsigned := types.NewTx(&types.DynamicFeeTx{ChainID: tx.ChainId(), Nonce: tx.Nonce(), GasTipCap: tx.GasTipCap(), GasFeeCap: tx.GasFeeCap(),
		Gas: tx.Gas(), To: tx.To(), Value: tx.Value(), Data: tx.Data()})
	return mustMarshal(t, unsigned)[:len(mustMarshal(t, unsigned))-3]
}

// On an OP-stack chain (feeModel op-stack) the funds check counts the L1 data fee: a signer
// with enough for the L2 gas but not for the data fee is refused with 422
// INSUFFICIENT_FUNDS naming both parts, and nothing is allocated. Over 100 transfers from
// another signer the fees recorded (gas used x effective price + the L1 fee the service
// computed, anvil reporting none) equal the signer's balance change to the wei.
func TestOPStackFundsCheckAndFeesReconcile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := startOPStackAnvil(t, time.Second)
	rich, poor := devKey(t, 0), devKey(t, 1)
	richAddr, poorAddr := crypto.PubkeyToAddress(rich.PublicKey), crypto.PubkeyToAddress(poor.PublicKey)
	if err := e2e.SetBalance(ctx, url, richAddr, (*hexutil.Big)(new(big.Int).Mul(big.NewInt(10), big.NewInt(params.Ether)))); err != nil {
		t.Fatal(err)
	}
	// Exactly the L2 cost of the refused intent below: value 1 + 21,000 gas x 2 gwei.
	maxFee := big.NewInt(2 * params.GWei)
	l2Cost := new(big.Int).Add(big.NewInt(1), new(big.Int).Mul(big.NewInt(21_000), maxFee))
	if err := e2e.SetBalance(ctx, url, poorAddr, (*hexutil.Big)(l2Cost)); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chain.RPCURL = url
		bc.Chain.FeeModel = conf.FeeModelOPStack
		bc.Create.CheckFunds = true
		bc.Signers.RawKeys = []string{hexutil.Encode(crypto.FromECDSA(rich)), hexutil.Encode(crypto.FromECDSA(poor))}
	}})

	refused := s.create(t, map[string]any{"signer": poorAddr.Hex(), "to": richAddr.Hex(), "value": "1", "gasLimit": 21000,
		"maxFeePerGas": maxFee.String(), "maxPriorityFeePerGas": "1"})
	msg, _ := refused.body["message"].(string)
	if refused.status != http.StatusUnprocessableEntity || refused.reason() != "INSUFFICIENT_FUNDS" {
		t.Fatalf("a signer short of the L1 data fee: got %d %s, want 422 INSUFFICIENT_FUNDS", refused.status, refused.raw)
	}
	for _, part := range []string{"L2 execution " + l2Cost.String() + " wei", "L1 data fee up to"} {
		if !strings.Contains(msg, part) {
			t.Fatalf("the refusal %q does not name %q", msg, part)
		}
	}
	if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1", poorAddr.Hex()); n != 0 {
		t.Fatalf("the refused intent left %d rows", n)
	}
	t.Logf("refused: %s", msg)

	eth, err := ethclient.DialContext(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eth.Close)
	before, err := eth.BalanceAt(ctx, richAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	const transfers = 100
	var ids []string
	sent := new(big.Int)
	for i := range transfers {
		value := int64(1_000 + i)
		payload := map[string]any{"signer": richAddr.Hex(), "to": poorAddr.Hex(), "value": fmt.Sprint(value), "gasLimit": 60_000}
		if i%4 == 1 {
			// Some carry call data, so the data fee differs between them.
			payload["data"] = hexutil.Encode(make([]byte, 100*i))
			payload["gasLimit"] = 60_000 + 40*100*i
		}
		ids = append(ids, s.createOK(t, payload))
		sent.Add(sent, big.NewInt(value))
	}
	for _, id := range ids {
		waitFor(t, 90*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	fees, l1Fees := new(big.Int), new(big.Int)
	for _, id := range ids {
		res := s.do(t, http.MethodGet, "/api/v1/tx/"+id, nil)
		receipt, _ := res.body["receipt"].(map[string]any)
		l1, okL1 := new(big.Int).SetString(fmt.Sprint(receipt["l1Fee"]), 10)
		fee, okFee := new(big.Int).SetString(fmt.Sprint(receipt["fee"]), 10)
		if !okL1 || !okFee || l1.Sign() <= 0 {
			t.Fatalf("receipt of %s lacks its L1 fee: %v", id, receipt)
		}
		fees.Add(fees, fee)
		l1Fees.Add(l1Fees, l1)
	}
	after, err := eth.BalanceAt(ctx, richAddr, nil)
	if err != nil {
		t.Fatal(err)
	}
	spent := new(big.Int).Sub(before, after)
	if reported := new(big.Int).Add(sent, fees); reported.Cmp(spent) != 0 {
		t.Fatalf("the signer's balance fell by %s wei; values %s + recorded fees %s = %s (off by %s)", spent, sent, fees, reported, new(big.Int).Sub(spent, reported))
	}
	t.Logf("%d transactions: balance change %s wei = values %s + fees %s (of which L1 data fees %s), to the wei", transfers, spent, sent, fees, l1Fees)

	// The spend counters say the same, by part (exact as floats: the totals are under 2^53).
	l2Fees := new(big.Int).Sub(fees, l1Fees)
	for part, want := range map[string]*big.Int{"l1": l1Fees, "l2": l2Fees} {
		label := fmt.Sprintf(`part="%s",signer="%s"`, part, richAddr.Hex())
		var got float64
		waitFor(t, 10*time.Second, "signer_spent_wei_total "+label, func() bool {
			got = s.metricSumsWhere(t, label)["signer_spent_wei_total"]
			return fmt.Sprintf("%.0f", got) == want.String()
		})
		t.Logf("signer_spent_wei_total{%s} = %.0f", label, got)
	}
}

func devKey(t *testing.T, i int) *ecdsa.PrivateKey {
	t.Helper()
	key, err := chain.DevKey(i)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// Whole-block receipts on an OP-stack chain owe no L1 fee for a deposit, which every
// OP-stack block holds: the block is read without asking for the deposit's raw transaction
// (a node does not always serve it), and the signer's receipt beside it carries its fee.
// Before, every block read asked for it, and a node without it failed the whole block.
func TestOPStackBlockReceiptsPassDeposits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := startOPStackAnvil(t, 0)
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	if err := e2e.SetBalance(ctx, url, from, (*hexutil.Big)(big.NewInt(params.Ether))); err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	depositor := strings.ToLower(from.Hex())
	proxy.SetDepositsFrom(&depositor)
	rpcChain, err := chain.DialRPC(ctx, proxy.URL(), chain.WithOPStackFees(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rpcChain.Close)
	sent := sendTransferAndMine(t, rpcChain, url, key, 0)
	head, err := rpcChain.LatestHeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := rpcChain.BlockReceipts(ctx, []uint64{head.Number})
	if err != nil {
		t.Fatalf("the block's receipts beside a deposit: %v", err)
	}
	var ours *services.Receipt
	for i, r := range blocks[0] {
		if r.TxHash == sent {
			ours = &blocks[0][i]
		}
	}
	if len(blocks[0]) != 2 || ours == nil || ours.L1Fee == nil || ours.L1Fee.Sign() <= 0 {
		t.Fatalf("receipts %+v: want the deposit's and the transfer's, the transfer with its L1 fee", blocks[0])
	}
}

// A spending policy's fee window counts an intent's L1 data fee bound on an OP-stack chain,
// with the funds check on or off: a window with room for the intent's gas at its fee cap
// and not for the data fee refuses it, one with room for both admits it. Before, with the
// check off the bound was not computed and the window counted the gas alone.
func TestOPStackFeeWindowCountsTheDataFeeWithOrWithoutTheFundsCheck(t *testing.T) {
	t.Parallel()
	url := startOPStackAnvil(t, time.Second)
	const key = "payouts-key"
	feeCap := big.NewInt(2 * params.GWei)
	gasFee := new(big.Int).Mul(big.NewInt(21_000), feeCap)
	// Far above the bound of an empty transfer's data fee (a transfer is under 200 bytes).
	roomy := new(big.Int).Add(gasFee, opStackPrices.L1FeeUpperBound(1_000))
	for _, checkFunds := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkFunds %v", checkFunds), func(t *testing.T) {
			t.Parallel()
			signer := devKey(t, 2)
			if !checkFunds {
				signer = devKey(t, 3)
			}
			if err := e2e.SetBalance(t.Context(), url, crypto.PubkeyToAddress(signer.PublicKey), (*hexutil.Big)(big.NewInt(params.Ether))); err != nil {
				t.Fatal(err)
			}
			s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
				bc.Chain.RPCURL = url
				bc.Chain.FeeModel = conf.FeeModelOPStack
				bc.Create.CheckFunds = checkFunds
				bc.Signers.RawKeys = []string{hexutil.Encode(crypto.FromECDSA(signer))}
				bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{{ID: "payouts", SHA256: sha256Hex(key), Signers: []string{"*"}, Admin: true}}}
			}})
			tests := []struct {
				name       string
				maxFee     *big.Int
				wantStatus int
			}{
				{"room for the gas alone", new(big.Int).Add(gasFee, big.NewInt(1)), http.StatusForbidden},
				{"room for the gas and the data fee", roomy, http.StatusAccepted},
			}
			for i, tc := range tests {
				policy, _ := json.Marshal(map[string]any{"policy": map[string]any{"windows": []any{map[string]any{"period": "24h", "maxFee": tc.maxFee.String()}}}})
				if a := s.doAs(t, http.MethodPut, "/api/v1/admin/policies/credential/payouts", policy, "X-API-Key", key); a.status != http.StatusOK {
					t.Fatalf("set the policy: %d %s", a.status, a.raw)
				}
				body, _ := json.Marshal(map[string]any{"signer": crypto.PubkeyToAddress(signer.PublicKey).Hex(), "to": devAddress(t, 7), "value": "1",
					"gasLimit": 21000, "maxFeePerGas": feeCap.String(), "maxPriorityFeePerGas": "1", "requestId": fmt.Sprintf("window-%d", i)})
				a := s.doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", key)
				md, _ := a.body["metadata"].(map[string]any)
				if a.status != tc.wantStatus || tc.wantStatus == http.StatusForbidden && (a.reason() != "POLICY_DENIED" || md["rule"] != domain.PolicyRuleWindowFee) {
					t.Fatalf("%s (a window of %s wei, the gas %s wei): %d %s; want %d", tc.name, tc.maxFee, gasFee, a.status, a.raw, tc.wantStatus)
				}
			}
		})
	}
}

// A node that no longer holds the state of a receipt's block (anvil keeps a few hundred
// blocks', a pruned node 128) cannot price its L1 data fee: the receipt is taken without it
// (unknown, left out of the fee recorded), by hash and in whole blocks. Before, the failed
// price read failed the whole batch of look-ups and every block scan that held it, for good:
// the transaction, and those looked up with it, were never recorded. A receipt whose
// block's state is there still gets its fee.
func TestOPStackReceiptsOfBlocksWhoseStateIsGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := startOPStackAnvil(t, 0)
	proxy, err := faultproxy.Start(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	proxy.SetStateKept(0)
	if err := proxy.SetMode(faultproxy.NoOldState); err != nil {
		t.Fatal(err)
	}
	rpcChain, err := chain.DialRPC(ctx, proxy.URL(), chain.WithOPStackFees(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rpcChain.Close)
	key := devKey(t, 4)
	from := crypto.PubkeyToAddress(key.PublicKey)
	if err := e2e.SetBalance(ctx, url, from, (*hexutil.Big)(big.NewInt(params.Ether))); err != nil {
		t.Fatal(err)
	}
	send := func(nonce uint64) common.Hash { return sendTransferAndMine(t, rpcChain, url, key, nonce) }
	old := []common.Hash{send(0), send(1)}
	current := send(2) // the head's block: its state is there

	results, err := rpcChain.TransactionReceipts(ctx, append(old, current))
	if err != nil {
		t.Fatalf("receipts by hash: %v", err)
	}
	var blocks []uint64
	for i, r := range results {
		if r.Err != nil || r.Receipt == nil {
			t.Fatalf("receipt %d: %+v, want it found", i, r)
		}
		if gone := i < len(old); gone != (r.Receipt.L1Fee == nil) {
			t.Fatalf("receipt %d (its block's state gone: %v): L1 fee %v", i, gone, r.Receipt.L1Fee)
		}
		if i < len(old) {
			blocks = append(blocks, r.Receipt.BlockNumber)
		}
	}
	read, err := rpcChain.BlockReceipts(ctx, blocks)
	if err != nil {
		t.Fatalf("whole blocks: %v", err)
	}
	for i, receipts := range read {
		ours := slices.IndexFunc(receipts, func(r services.Receipt) bool { return r.TxHash == old[i] })
		if ours < 0 || receipts[ours].L1Fee != nil {
			t.Fatalf("block %d: %d receipts, ours at %d; want ours, without an L1 fee", blocks[i], len(receipts), ours)
		}
	}
	if proxy.OldStateRefused() == 0 {
		t.Fatal("the node was never asked for old state: the test did not reach a node without it")
	}
}
