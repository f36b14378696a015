package integration

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"maps"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// probedNode is a node the answer probe runs against, through the production adapter.
type probedNode struct {
	name string
	rpc  *chain.RPCChain
	mine func() error
}

// gethNode is go-ethereum's own pool and EVM (the simulated backend, served over HTTP),
// with blocks sealed only when the probe asks; key is funded at genesis.
func gethNode(t *testing.T, key *ecdsa.PrivateKey) probedNode {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, ExtraFunded: []common.Address{crypto.PubkeyToAddress(key.PublicKey)}, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	sim.Commit()
	return probedNode{name: "geth", rpc: dialNode(t, sim.HTTPEndpoint()), mine: func() error { sim.Commit(); return nil }}
}

// anvilNode is foundry's anvil (`make test-binaries` unpacks it), mining only when the
// probe asks; key is funded through anvil_setBalance.
func anvilNode(t *testing.T, key *ecdsa.PrivateKey) probedNode {
	t.Helper()
	bin, err := e2e.FindAnvil()
	if err != nil {
		t.Fatal(err)
	}
	node, err := e2e.StartAnvil(context.Background(), e2e.AnvilOptions{Bin: bin, ChainID: 1337})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Stop() })
	balance := new(big.Int).Mul(big.NewInt(1000), big.NewInt(params.Ether))
	if err := e2e.SetBalance(context.Background(), node.URL(), crypto.PubkeyToAddress(key.PublicKey), (*hexutil.Big)(balance)); err != nil {
		t.Fatal(err)
	}
	return probedNode{name: "anvil", rpc: dialNode(t, node.URL()), mine: func() error { return e2e.Mine(context.Background(), node.URL()) }}
}

// mineThrough seals blocks until from's transaction at nonce is mined. go-ethereum's pool
// admits a transaction before it makes it pending (its reorg loop runs apart from the
// send), so a block sealed straight after a send can miss it; a probe that needs it mined
// asks the chain rather than trusting one block.
func mineThrough(t *testing.T, ctx context.Context, node probedNode, from common.Address, nonce uint64) {
	t.Helper()
	for {
		if err := node.mine(); err != nil {
			t.Fatal(err)
		}
		mined, err := node.rpc.NonceAt(ctx, from)
		if err != nil {
			t.Fatal(err)
		}
		if mined > nonce {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: nonce %d of %s still not mined: %v", node.name, nonce, from, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func dialNode(t *testing.T, url string) *chain.RPCChain {
	t.Helper()
	c, err := chain.DialRPC(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// answer is what a node said to one probe, as the pipeline reads it: accepted, one of the
// outcome table's classes (an answer no phrase knows included), or a failure to reach it.
type answer struct {
	class   string
	message string
}

func answerOf(err error) answer {
	if err == nil {
		return answer{class: "accepted"}
	}
	if class := services.AnswerClassOf(err); class != nil {
		return answer{class: class.Error(), message: err.Error()}
	}
	if errors.Is(err, services.ErrExecutionReverted) {
		return answer{class: services.ErrExecutionReverted.Error(), message: err.Error()}
	}
	return answer{class: "not a node's answer", message: err.Error()}
}

// probeAnswers sends the same intents to node and records each answer, in order: every
// case the pipeline meets (accepted, already known, a replacement too cheap and one that
// clears the bump, nonce too low once mined, a nonce gap, insufficient funds, intrinsic
// gas too low, a gas limit above the block's, another chain's signature) and an estimate
// of a call that reverts.
func probeAnswers(t *testing.T, node probedNode, key *ecdsa.PrivateKey) map[string]answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	from := crypto.PubkeyToAddress(key.PublicKey)
	chainID, err := node.rpc.ChainID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fees, err := node.rpc.SuggestFees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nonce, err := node.rpc.PendingNonceAt(ctx, from)
	if err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x00000000000000000000000000000000000000b0")
	tip := new(big.Int).Add(fees.TipCap, big.NewInt(params.GWei))
	feeCap := new(big.Int).Add(new(big.Int).Mul(fees.BaseFee, big.NewInt(2)), tip)
	sign := func(k *ecdsa.PrivateKey, id *big.Int, tx *types.DynamicFeeTx) []byte {
		tx.ChainID = id
		signed, err := types.SignNewTx(k, types.LatestSignerForChainID(id), tx)
		if err != nil {
			t.Fatal(err)
		}
		raw, err := signed.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	transfer := func(n uint64, value int64, feeCap, tip *big.Int, gas uint64) *types.DynamicFeeTx {
		return &types.DynamicFeeTx{Nonce: n, To: &to, Value: big.NewInt(value), Gas: gas, GasFeeCap: feeCap, GasTipCap: tip}
	}
	bumped := func(v *big.Int, percent int64) *big.Int {
		return new(big.Int).Div(new(big.Int).Mul(v, big.NewInt(100+percent)), big.NewInt(100))
	}
	send := func(raw []byte) answer {
		errs, err := node.rpc.SendRawTransactions(ctx, [][]byte{raw})
		if err != nil {
			t.Fatalf("%s: send: %v", node.name, err)
		}
		return answerOf(errs[0])
	}
	got := map[string]answer{}
	first := sign(key, chainID, transfer(nonce, 1, feeCap, tip, 21_000))
	got["accepted"] = send(first)
	got["already known"] = send(first)
	// How much dearer a replacement must be is each pool's own rule (geth 10%, anvil any
	// rise): one at the same fees is too cheap everywhere.
	got["replacement at the same fees"] = send(sign(key, chainID, transfer(nonce, 2, feeCap, tip, 21_000)))
	got["replacement 12% dearer"] = send(sign(key, chainID, transfer(nonce, 3, bumped(feeCap, 12), bumped(tip, 12), 21_000)))
	mineThrough(t, ctx, node, from, nonce)
	got["nonce too low"] = send(sign(key, chainID, transfer(nonce, 4, feeCap, tip, 21_000)))
	got["nonce gap"] = send(sign(key, chainID, transfer(nonce+5, 5, feeCap, tip, 21_000)))
	unfunded, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	got["insufficient funds"] = send(sign(unfunded, chainID, transfer(0, 1, feeCap, tip, 21_000)))
	got["intrinsic gas too low"] = send(sign(key, chainID, transfer(nonce+1, 6, feeCap, tip, 20_000)))
	// Above both nodes' block gas limit (30-60 million) and, at these fees, under geth's
	// 1 ether cap on a transaction's fee, which it checks first.
	got["gas above the block's limit"] = send(sign(key, chainID, transfer(nonce+1, 7, feeCap, tip, 200_000_000)))
	got["signed for another chain"] = send(sign(key, new(big.Int).Add(chainID, big.NewInt(1)), transfer(nonce+1, 8, feeCap, tip, 21_000)))

	// A contract whose every call reverts: its code is PUSH1 0 PUSH1 0 REVERT.
	deploy := &types.DynamicFeeTx{Nonce: nonce + 1, Gas: 100_000, GasFeeCap: feeCap, GasTipCap: tip, Data: common.FromHex("0x6005600c60003960056000f360006000fd")}
	if a := send(sign(key, chainID, deploy)); a.class != "accepted" {
		t.Fatalf("%s: deploying the reverting contract: %+v", node.name, a)
	}
	mineThrough(t, ctx, node, from, nonce+1)
	reverter := crypto.CreateAddress(from, nonce+1)
	_, err = node.rpc.EstimateGas(ctx, services.CallRequest{From: from, To: &reverter})
	got["estimate of a call that reverts"] = answerOf(err)
	return got
}

// The same intents meet the same answer classes on go-ethereum and on anvil: what the
// pipeline does next depends only on the class, so a class that differed would make the
// service behave differently on the other node. Answers no phrase knows yet are the class
// "unknown answer" on both (rebroadcast, counted and alerted on, never final).
func TestEveryAnswerClassMatchesOnGethAndAnvil(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	nodes := []probedNode{gethNode(t, key), anvilNode(t, key)}
	answers := make([]map[string]answer, len(nodes))
	for i, node := range nodes {
		answers[i] = probeAnswers(t, node, key)
	}
	want := map[string]string{
		"accepted":                        "accepted",
		"already known":                   services.ErrKnownTransaction.Error(),
		"replacement at the same fees":    services.ErrUnderpriced.Error(),
		"replacement 12% dearer":          "accepted",
		"nonce too low":                   services.ErrNonceTooLow.Error(),
		"nonce gap":                       "accepted",
		"insufficient funds":              services.ErrInsufficientFunds.Error(),
		"intrinsic gas too low":           services.ErrNotMineable.Error(),
		"gas above the block's limit":     services.ErrNotMineable.Error(),
		"signed for another chain":        services.ErrUnknownAnswer.Error(),
		"estimate of a call that reverts": services.ErrExecutionReverted.Error(),
	}
	var table strings.Builder
	for _, probe := range slices.Sorted(maps.Keys(want)) {
		class := want[probe]
		row := fmt.Sprintf("%-32s", probe)
		for i, node := range nodes {
			a, ok := answers[i][probe]
			if !ok {
				t.Fatalf("%s: no answer recorded for %q", node.name, probe)
			}
			if a.class != class {
				t.Errorf("%s answers %q with %q (%s), want %q, what every node must answer", node.name, probe, a.class, a.message, class)
			}
			row += fmt.Sprintf(" | %s: %s", node.name, firstOf(a.message, a.class))
		}
		table.WriteString(row + "\n")
	}
	t.Logf("answers by node:\n%s", table.String())
}

// firstOf is message, shortened, or class when there is none.
func firstOf(message, class string) string {
	if message == "" {
		return class
	}
	if len(message) > 90 {
		return message[:90] + "..."
	}
	return message
}
