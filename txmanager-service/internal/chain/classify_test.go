package chain_test

import (
	"errors"
	"math/big"
	"slices"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// sendErrorClasses are the answer classes of the outcome table (services.ChainAnswers)
// that phrases alone are read as (an answer no phrase knows is every other node answer;
// a gas limit short of the L1 part is read from the words and the transaction together,
// TestIntrinsicGasTooLowIsReadAgainstTheTransaction).
func sendErrorClasses() []error {
	var classes []error
	for _, row := range services.ChainAnswers() {
		if row.Class != nil && row.Class != services.ErrUnknownAnswer && row.Class != services.ErrL1GasShort && !slices.Contains(classes, row.Class) { //nolint:errorlint // which sentinel, compared as values
			classes = append(classes, row.Class)
		}
	}
	return classes
}

func TestClassifySendError(t *testing.T) {
	// Messages as go-ethereum v1.17.8 formats them (core/txpool, core/error.go,
	// core/state_transition.go, internal/ethapi), plus a few other clients' wordings.
	type sendCase struct {
		message string
		want    error // nil: returned unchanged
	}
	tests := []sendCase{
		{"already known", services.ErrKnownTransaction},
		{"known transaction: 4b4b1c3d3e2f1a0b", services.ErrKnownTransaction},
		{"Known transaction", services.ErrKnownTransaction},
		{"AlreadyKnown", services.ErrKnownTransaction},
		{"nonce too low: next nonce 5, tx nonce 3", services.ErrNonceTooLow},
		{"nonce too low: address 0x71562b71999873DB5b286dF957af199Ec94617F7, tx: 3 state: 5", services.ErrNonceTooLow},
		{"Nonce too low", services.ErrNonceTooLow},
		{"OldNonce", services.ErrNonceTooLow},
		{"replacement transaction underpriced", services.ErrUnderpriced},
		{"transaction underpriced", services.ErrUnderpriced},
		{"transaction gas price below minimum: gas tip cap 0, minimum needed 1", services.ErrUnderpriced},
		{"max fee per gas less than block base fee: address 0x71562b71999873DB5b286dF957af199Ec94617F7, maxFeePerGas: 1, baseFee: 875000000", services.ErrUnderpriced},
		{"fee cap less than block base fee: address 0x71562b71999873DB5b286dF957af199Ec94617F7, gasFeeCap: 1 baseFee: 875000000", services.ErrUnderpriced},
		{"FeeTooLow", services.ErrUnderpriced},
		{"insufficient funds for gas * price + value: balance 0, tx cost 210000000000000, overshot 210000000000000", services.ErrInsufficientFunds},
		{"insufficient funds for transfer: address 0x71562b71999873DB5b286dF957af199Ec94617F7", services.ErrInsufficientFunds},
		{"nonce too high", services.ErrNonceGap},
		{"txpool is full", services.ErrPoolFull},
		{"exceeds block gas limit", services.ErrNotMineable},
		{"intrinsic gas too low: gas 20000, minimum needed 21000", services.ErrNotMineable},
		{"tx fee (1.50 ether) exceeds the configured cap (1.00 ether)", services.ErrAboveNodeFeeCap},
		{"unknown transaction type", nil}, // "known transaction" must not match inside "unknown"
		{"transaction type not supported", nil},
		{"context deadline exceeded", nil},
	}
	// A class added to the outcome table needs phrases the classifier reads it from.
	for _, class := range sendErrorClasses() {
		if !slices.ContainsFunc(tests, func(tc sendCase) bool {
			return tc.want == class //nolint:errorlint // the case names the sentinel itself
		}) {
			t.Errorf("the outcome table's class %v has no node message here that classifies as it", class)
		}
	}
	for _, tc := range tests {
		t.Run(tc.message, func(t *testing.T) {
			original := errors.New(tc.message)
			got := chain.ClassifySendError(original)

			if !errors.Is(got, original) {
				t.Errorf("result %v does not wrap the original error", got)
			}
			if !strings.Contains(got.Error(), tc.message) {
				t.Errorf("result %q lost the node's message %q", got, tc.message)
			}
			for _, class := range sendErrorClasses() {
				if want := class == tc.want; errors.Is(got, class) != want { //nolint:errorlint // which sentinel the case names, compared as values
					t.Errorf("errors.Is(%q, %v) = %v, want %v", got, class, !want, want)
				}
			}
			if tc.want == nil && got != original { //nolint:errorlint // the very same value must come back
				t.Errorf("unclassified error came back as %#v, want the original", got)
			}
		})
	}
}

// "intrinsic gas too low" is final only when the gas limit is short of what the EVM
// charges before the transaction runs. Arbitrum refuses, in the same words, a limit that
// covers that but not the L1 part of the cost it counts as gas, which moves with the L1
// price: that one is rebroadcast, not cancelled.
func TestIntrinsicGasTooLowIsReadAgainstTheTransaction(t *testing.T) {
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	data := []byte{0, 1, 2, 3} // 4 + 3x16 gas, and a call-data floor of 21000 + 10x13 tokens
	fees := func(p txParams) txParams {
		p.value, p.feeCap, p.tipCap = big.NewInt(1), big.NewInt(1e9), big.NewInt(1)
		return p
	}
	tests := []struct {
		name    string
		tx      txParams
		message string
		want    error
	}{
		{"a plain transfer at 21000, as Nitro's gas charging hook answers", txParams{to: &to, gas: 21_000}, "intrinsic gas too low", services.ErrL1GasShort},
		{"a plain transfer with room to spare", txParams{to: &to, gas: 60_000}, "intrinsic gas too low: gas 60000, minimum needed 81234", services.ErrL1GasShort},
		{"a call at its call-data floor, above its data's cost", txParams{to: &to, gas: 21_000 + 10*13, data: data}, "intrinsic gas too low", services.ErrL1GasShort},
		{"a call short of its data's cost", txParams{to: &to, gas: 21_000, data: data}, "intrinsic gas too low: gas 21000, minimum needed 21052", services.ErrNotMineable},
		{"a call at its data's cost, under the call-data floor", txParams{to: &to, gas: 21_000 + 4 + 3*16, data: data}, "intrinsic gas too low", services.ErrNotMineable},
		{"a creation without its 32000", txParams{gas: 30_000, data: data}, "intrinsic gas too low", services.ErrNotMineable},
		{"another answer is read as its words say", txParams{to: &to, gas: 21_000}, "exceeds block gas limit", services.ErrNotMineable},
		{"intrinsic gas too high is not too low", txParams{to: &to, gas: 21_000}, "intrinsic gas too high -- tx.gas_limit > env.block.gas_limit", services.ErrNotMineable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, raw := signTx(t, key, fees(tc.tx))
			answer := codedError{message: tc.message, code: -32000}
			got := chain.ClassifySendErrorOf(raw, answer)
			if class := services.AnswerClassOf(got); class != tc.want { //nolint:errorlint // which sentinel, compared as values
				t.Fatalf("ClassifySendErrorOf = %v: class %v, want %v", got, class, tc.want)
			}
			if !errors.Is(got, answer) || !strings.Contains(got.Error(), tc.message) {
				t.Fatalf("%q lost the node's answer %q", got, tc.message)
			}
		})
	}
	// Bytes that are not a transaction leave the words to decide, as before.
	if got := chain.ClassifySendErrorOf([]byte{0x02, 0xc0}, codedError{message: "intrinsic gas too low", code: -32000}); !errors.Is(got, services.ErrNotMineable) {
		t.Fatalf("undecodable bytes: %v, want not mineable", got)
	}
}

// A node's own answer in words no phrase knows is an unknown answer (counted, alerted on,
// never final); a failure to reach the node is not one.
func TestUnknownNodeAnswersAreToldFromTransportFailures(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a JSON-RPC error no phrase knows", codedError{message: "the chain is on holiday", code: -32000}, true},
		{"a JSON-RPC error a phrase knows", codedError{message: "nonce too low", code: -32000}, false},
		{"an HTTP error", rpc.HTTPError{StatusCode: 502, Status: "502 Bad Gateway", Body: []byte("upstream unavailable")}, false},
		{"no answer", errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := chain.ClassifySendError(tc.err)
			if errors.Is(got, services.ErrUnknownAnswer) != tc.want {
				t.Errorf("ClassifySendError(%v) = %v: unknown answer %v, want %v", tc.err, got, !tc.want, tc.want)
			}
			if !strings.Contains(got.Error(), tc.err.Error()) {
				t.Errorf("%v lost the original error %q", got, tc.err)
			}
		})
	}
}

func TestClassifySendErrorKeepsRPCErrorDetails(t *testing.T) {
	if got := chain.ClassifySendError(nil); got != nil {
		t.Fatalf("ClassifySendError(nil) = %v, want nil", got)
	}
	got := chain.ClassifySendError(codedError{message: "nonce too low: next nonce 2, tx nonce 1", code: -32000})
	if !errors.Is(got, services.ErrNonceTooLow) {
		t.Fatalf("got %v, want ErrNonceTooLow", got)
	}
	var rpcErr rpc.Error
	if !errors.As(got, &rpcErr) || rpcErr.ErrorCode() != -32000 {
		t.Errorf("JSON-RPC error code lost from %v", got)
	}
}
