package integration

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Intents that cannot be paid for or cannot run are refused before allocation, with a
// reason a client can act on (never a 503 it would retry forever), and consume nothing:
// with and without a client gas limit, on go-ethereum and on anvil alike.
func TestAdmissionRefusesUnpayableAndUnrunnableIntents(t *testing.T) {
	t.Parallel()
	onEveryNode(t, 200*time.Millisecond, admissionRefusesUnpayableAndUnrunnable)
}

func admissionRefusesUnpayableAndUnrunnable(t *testing.T, sim devChain) {
	poorKey := newKey(t)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(poorKey)))
	}})
	rich := crypto.PubkeyToAddress(sim.DevKeys()[0].PublicKey).Hex()
	poor := crypto.PubkeyToAddress(poorKey.PublicKey).Hex()
	to := devAddress(t, 5)
	// The rich signer has a transaction before the refusals, so its cursor is past zero.
	s.createOK(t, map[string]any{"signer": rich, "to": to, "value": "1", "gasLimit": 21000})
	moreThanAnyBalance := new(big.Int).Lsh(big.NewInt(1), 100).String()

	tests := []struct {
		name        string
		payload     map[string]any
		wantReason  string
		wantMessage string
	}{
		{"unfunded signer, value, gasLimit given", map[string]any{"signer": poor, "to": to, "value": "1000", "gasLimit": 21000}, "INSUFFICIENT_FUNDS", "can spend 0 wei"},
		{"unfunded signer, value, gas estimated", map[string]any{"signer": poor, "to": to, "value": "1000"}, "INSUFFICIENT_FUNDS", "insufficient funds"},
		{"unfunded signer, gas alone, gasLimit given", map[string]any{"signer": poor, "to": to, "value": "0", "gasLimit": 21000}, "INSUFFICIENT_FUNDS", "maxFeePerGas"},
		{"value above the balance, gasLimit given", map[string]any{"signer": rich, "to": to, "value": moreThanAnyBalance, "gasLimit": 21000}, "INSUFFICIENT_FUNDS", "this intent may cost up to"},
		{"value above the balance, gas estimated", map[string]any{"signer": rich, "to": to, "value": moreThanAnyBalance}, "INSUFFICIENT_FUNDS", "insufficient funds"},
		{"creation code with an invalid opcode, gas estimated", map[string]any{"signer": rich, "data": "0xfe"}, "INTENT_REVERTS", "opcode"},
		{"creation code with an invalid opcode, gasLimit given", map[string]any{"signer": rich, "data": "0xfe", "gasLimit": 100000}, "INTENT_REVERTS", "opcode"},
		{"call that reverts, gasLimit given", map[string]any{"signer": rich, "data": "0x60006000fd", "gasLimit": 100000}, "INTENT_REVERTS", "execution reverted"},
		// The node ran it out of gas at the limit given: the limit, not the intent, is wrong.
		{"creation that needs more gas than given", map[string]any{"signer": rich, "data": "0x6001600055", "gasLimit": 60000}, "INVALID_ARGUMENT", "is below the"},
	}
	cursor := func(signer string) int64 {
		return s.count(t, "SELECT COALESCE(max(next_nonce), -1) FROM signer_nonce_cursor WHERE signer = $1", signer)
	}
	richBefore, poorBefore := cursor(rich), cursor(poor)
	rowsBefore := s.count(t, "SELECT count(*) FROM managed_tx")
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := s.create(t, tc.payload)
			wantStatus := http.StatusUnprocessableEntity
			if tc.wantReason == "INVALID_ARGUMENT" {
				wantStatus = http.StatusBadRequest
			}
			if a.status != wantStatus || a.reason() != tc.wantReason {
				t.Fatalf("got %d %s, want %d %s", a.status, a.raw, wantStatus, tc.wantReason)
			}
			// The node's own words: go-ethereum says "invalid opcode: opcode 0xfe not
			// defined", anvil "EVM error InvalidFEOpcode".
			if msg, _ := a.body["message"].(string); !strings.Contains(strings.ToLower(msg), strings.ToLower(tc.wantMessage)) {
				t.Fatalf("message %q lacks %q", msg, tc.wantMessage)
			}
		})
	}
	if got := cursor(rich); got != richBefore {
		t.Errorf("the funded signer's next nonce moved from %d to %d on refused intents", richBefore, got)
	}
	if got := cursor(poor); got != poorBefore {
		t.Errorf("the unfunded signer's next nonce moved from %d to %d on refused intents", poorBefore, got)
	}
	if got := s.count(t, "SELECT count(*) FROM managed_tx"); got != rowsBefore {
		t.Errorf("managed_tx grew from %d to %d on refused intents", rowsBefore, got)
	}

	// The gauges show the unfunded signer's position on its chain (refreshed at start for
	// every signer).
	metrics := s.do(t, http.MethodGet, "/metrics", nil).raw
	onChain := `{chain_id="1337",signer="`
	for _, want := range []string{`signer_balance_wei` + onChain + poor + `"} 0`, `signer_spendable_wei` + onChain + poor + `"} 0`, `signer_balance_wei` + onChain + rich + `"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}

	// Once funded, the signer is admitted at the nonce nothing took, and the funded
	// signer's next transaction follows its last accepted one.
	fund(t, sim, sim.DevKeys()[1], common.HexToAddress(poor), big.NewInt(params.Ether))
	waitFor(t, 30*time.Second, "the funded signer admitted", func() bool {
		return s.create(t, map[string]any{"signer": poor, "to": to, "value": "1000", "gasLimit": 21000, "requestId": "after-funding"}).status == http.StatusAccepted
	})
	if n := s.count(t, "SELECT nonce FROM managed_tx WHERE signer = $1 AND request_id = 'after-funding'", poor); n != 0 {
		t.Errorf("first admitted transaction of the funded signer has nonce %d, want 0", n)
	}
	id := s.createOK(t, map[string]any{"signer": rich, "to": to, "value": "1", "gasLimit": 21000})
	if n := s.count(t, "SELECT nonce FROM managed_tx WHERE tx_id = $1", id); n != richBefore {
		t.Errorf("the funded signer's next transaction has nonce %d, want %d", n, richBefore)
	}
}

// A transaction admitted while the signer cannot pay (here the check is off, as when the
// balance is spent outside the service after admission) waits, INSUFFICIENT_FUNDS, without
// anyone resolving it, and confirms by itself once the signer is funded; so do the ones
// behind it. On go-ethereum and on anvil alike.
func TestUnfundedSignerWaitsThenConfirms(t *testing.T) {
	t.Parallel()
	onEveryNode(t, 200*time.Millisecond, unfundedSignerWaitsThenConfirms)
}

func unfundedSignerWaitsThenConfirms(t *testing.T, sim devChain) {
	poorKey := newKey(t)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(poorKey)))
		bc.Create.CheckFunds = false
	}})
	poor := crypto.PubkeyToAddress(poorKey.PublicKey)
	ids := make([]string, 3)
	for i := range ids {
		ids[i] = s.createOK(t, map[string]any{"signer": poor.Hex(), "to": devAddress(t, 5), "value": "1000", "gasLimit": 21000})
	}
	waitFor(t, 30*time.Second, "the first transaction waiting for funds", func() bool {
		return s.tx(t, ids[0]).subState == "INSUFFICIENT_FUNDS"
	})
	time.Sleep(2 * time.Second) // blocks go by: nothing of the unfunded signer is mined
	for _, id := range ids {
		if row := s.tx(t, id); row.state == "CONFIRMED" || row.blockHash != "" {
			t.Fatalf("transaction %s of an unfunded signer was mined: %+v", id, row)
		}
	}

	fund(t, sim, sim.DevKeys()[1], poor, big.NewInt(params.Ether))
	waitFor(t, 60*time.Second, "every transaction confirmed after funding", func() bool {
		for _, id := range ids {
			if s.tx(t, id).state != "CONFIRMED" {
				return false
			}
		}
		return true
	})
	if n := s.count(t, "SELECT count(*) FROM stuck_resolution_audit"); n != 0 {
		t.Errorf("%d operator resolutions recorded, want none", n)
	}
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

// fund sends amount from a dev key outside the service and waits until it is mined.
func fund(t *testing.T, sim devChain, from *ecdsa.PrivateKey, to common.Address, amount *big.Int) {
	t.Helper()
	ctx := context.Background()
	sender := crypto.PubkeyToAddress(from.PublicKey)
	nonce, err := sim.PendingNonceAt(ctx, sender)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := types.SignNewTx(from, types.LatestSignerForChainID(big.NewInt(chain.SimulatedChainID)), &types.DynamicFeeTx{
		ChainID: big.NewInt(chain.SimulatedChainID), Nonce: nonce, Gas: 21000, To: &to,
		GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei), Value: amount,
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := tx.MarshalBinary()
	if err := sim.SendRawTransaction(ctx, raw); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the funding transfer mined", func() bool {
		balance, err := sim.BalanceAt(ctx, to)
		return err == nil && balance.Sign() > 0
	})
}
