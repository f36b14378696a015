package chain

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Node errors cross JSON-RPC as text only, so classification has to match messages. The
// phrases are lower case; matching ignores case and requires each phrase to start a word,
// so "known transaction" does not match inside "unknown transaction".
type errorPhrase struct {
	phrase string
	class  error
}

// sendErrorPhrases are checked in order; the first match wins. docs/chains.md lists, for
// each class, every client's wording with the file and version it was read from; its rows
// are this table's test fixtures.
var sendErrorPhrases = []errorPhrase{
	{"already known", services.ErrKnownTransaction},     // geth, reth, Nethermind, Erigon
	{"known transaction", services.ErrKnownTransaction}, // Besu, zkSync Era
	{"alreadyknown", services.ErrKnownTransaction},      // Nethermind before its move to geth's wording
	{"already imported", services.ErrKnownTransaction},  // anvil
	{"nonce too low", services.ErrNonceTooLow},
	{"oldnonce", services.ErrNonceTooLow}, // Nethermind, older
	{"replacement transaction underpriced", services.ErrUnderpriced},
	{"replacementnotallowed", services.ErrUnderpriced}, // Nethermind, older
	{"transaction underpriced", services.ErrUnderpriced},
	{"underpriced", services.ErrUnderpriced},                         // Erigon's bare reason
	{"transaction gas price below minimum", services.ErrUnderpriced}, // geth, bor: tip under the pool's minimum
	{"priority fee below minimum", services.ErrUnderpriced},          // reth
	{"gas price below configured minimum", services.ErrUnderpriced},  // Besu
	{"gas price below current base fee", services.ErrUnderpriced},    // Besu
	{"max fee per gas less than block base fee", services.ErrUnderpriced},
	{"fee cap less than block base fee", services.ErrUnderpriced}, // older geth wording
	{"feetoolow", services.ErrUnderpriced},                        // Nethermind, older (FeeTooLow, FeeTooLowToCompete)
	{"fee too low", services.ErrUnderpriced},                      // Erigon
	{"could not replace existing tx", services.ErrUnderpriced},    // Erigon: a replacement not paying enough more
	{"insufficient funds", services.ErrInsufficientFunds},
	{"insufficientfunds", services.ErrInsufficientFunds},                    // Nethermind, older
	{"upfront cost exceeds account balance", services.ErrInsufficientFunds}, // Besu
	{"not enough balance to cover the fee", services.ErrInsufficientFunds},  // zkSync Era
	{"nonce too high", services.ErrNonceGap},
	{"noncegap", services.ErrNonceGap},                                         // Nethermind, older
	{"nonce too far in future", services.ErrNonceGap},                          // Nethermind
	{"noncetoofarinfuture", services.ErrNonceGap},                              // Nethermind, older
	{"nonce is too distant from current sender nonce", services.ErrNonceGap},   // Besu
	{"an invalid transaction with a lower nonce exists", services.ErrNonceGap}, // Besu: the one before is missing or refused
	{"txpool is full", services.ErrPoolFull},
	{"sub-pool is full", services.ErrPoolFull},                    // Erigon: "pending sub-pool is full" and the others
	{"account limit exceeded: pooled", services.ErrPoolFull},      // geth: the pool's limit of one account's transactions
	{"exceeds the configured cap", services.ErrAboveNodeFeeCap},   // geth, bor, Erigon, reth
	{"transaction fee cap exceeded", services.ErrAboveNodeFeeCap}, // Besu
	{"intrinsic gas too low", services.ErrNotMineable},
	{"insufficient gas for floor data gas cost", services.ErrNotMineable},                  // geth: under EIP-7623's call-data floor
	{"intrinsic gas exceeds gas limit", services.ErrNotMineable},                           // Besu
	{"intrinsicgas", services.ErrNotMineable},                                              // Erigon
	{"intrinsic gas too high", services.ErrNotMineable},                                    // anvil: a gas limit above the block's
	{"transaction gas limit is greater than the block gas limit", services.ErrNotMineable}, // anvil: EIP-7825's cap
	{"exceeds block gas limit", services.ErrNotMineable},
	{"transaction gas limit too high", services.ErrNotMineable}, // geth, EIP-7825's per-transaction cap
	{"gas limit reached", services.ErrNotMineable},              // Nethermind
	{"oversized data", services.ErrNotMineable},
}

// ClassifySendError maps an eth_sendRawTransaction failure onto the services sentinels.
// A classified error wraps both the sentinel and the original error, so errors.Is works
// and the node's message (with its nonces and balances) stays in Error(). A node's own
// answer that no phrase matches is services.ErrUnknownAnswer; transport failures (no
// answer, an HTTP error) are returned unchanged.
func ClassifySendError(err error) error {
	if err == nil {
		return nil
	}
	if class := matchPhrase(err.Error(), sendErrorPhrases); class != nil {
		if class == services.ErrAboveNodeFeeCap { //nolint:errorlint // which sentinel the table gave, compared as a value
			// The operator's clue: which setting on each side.
			return fmt.Errorf("%w: %w (the node's own limit on gas limit x fee cap, go-ethereum's --rpc.txfeecap: set fees.nodeTxFeeCap at or below it)", class, err)
		}
		return fmt.Errorf("%w: %w", class, err)
	}
	if nodeAnswered(err) {
		return fmt.Errorf("%w: %w", services.ErrUnknownAnswer, err)
	}
	return err
}

// ClassifySendErrorOf classifies the node's answer to the broadcast of raw as
// ClassifySendError does, and reads "intrinsic gas too low" against the transaction itself.
// Arbitrum counts the L1 part of a transaction's cost as gas and refuses a gas limit short
// of it in the same words as one short of what the EVM charges before running. Only the
// second is for good (services.ErrNotMineable); the first passes as the L1 price falls
// (services.ErrL1GasShort). A limit that covers the EVM's own charge is the first.
func ClassifySendErrorOf(raw []byte, err error) error {
	classified := ClassifySendError(err)
	if !errors.Is(classified, services.ErrNotMineable) || matchPhrase(err.Error(), intrinsicGasTooLow) == nil {
		return classified
	}
	var tx types.Transaction
	if tx.UnmarshalBinary(raw) != nil {
		return classified
	}
	own := ownIntrinsicGas(&tx)
	if tx.Gas() < own {
		return classified
	}
	return fmt.Errorf("%w: %w (gas limit %d, and the EVM charges %d before it runs: the node counts more, as Arbitrum counts the L1 part of the cost as gas)",
		services.ErrL1GasShort, err, tx.Gas(), own)
}

// intrinsicGasTooLow is go-ethereum's wording, which Arbitrum Nitro keeps for both shortfalls.
var intrinsicGasTooLow = []errorPhrase{{"intrinsic gas too low", services.ErrNotMineable}}

// Access list and authorization charges (EIP-2930, EIP-7702), per entry.
const (
	accessListAddressGas = 2_400
	accessListSlotGas    = 1_900
	authorizationGas     = 25_000
)

// ownIntrinsicGas is what the EVM charges tx before it runs, by the rules every chain of
// ours follows, and at least Prague's call-data floor.
func ownIntrinsicGas(tx *types.Transaction) uint64 {
	gas := domain.IntrinsicGas(tx.To() == nil, tx.Data())
	list := tx.AccessList()
	gas += accessListAddressGas*uint64(len(list)) + accessListSlotGas*uint64(list.StorageKeys())
	gas += authorizationGas * uint64(len(tx.SetCodeAuthorizations()))
	return max(gas, domain.CallDataFloorGas(tx.Data()))
}

// nodeAnswered: err is the node's JSON-RPC error object, not a failure to reach it.
func nodeAnswered(err error) bool {
	var httpErr rpc.HTTPError
	if errors.As(err, &httpErr) {
		return false
	}
	var rpcErr rpc.Error
	return errors.As(err, &rpcErr)
}

// revertCode is the JSON-RPC error code geth and most clients give an EVM revert.
const revertCode = 3

// executionFailurePhrases are eth_estimateGas answers that mean the intent itself cannot
// run, whatever gas or node it gets: the EVM's own errors (go-ethereum core/vm/errors.go)
// and the estimator's "gas required exceeds allowance" when it never succeeds up to the cap.
var executionFailurePhrases = []errorPhrase{
	{"invalid opcode", services.ErrExecutionReverted},
	{"out of gas", services.ErrExecutionReverted},
	{"gas required exceeds allowance", services.ErrExecutionReverted},
	{"gas required exceeds", services.ErrExecutionReverted}, // Erigon, Besu
	{"contract creation code storage out of gas", services.ErrExecutionReverted},
	{"stack underflow", services.ErrExecutionReverted},
	{"stack limit reached", services.ErrExecutionReverted},
	{"invalid jump destination", services.ErrExecutionReverted},
	{"write protection", services.ErrExecutionReverted},
	{"return data out of bounds", services.ErrExecutionReverted},
	{"max call depth exceeded", services.ErrExecutionReverted},
	{"max code size exceeded", services.ErrExecutionReverted},
	{"max initcode size exceeded", services.ErrExecutionReverted},
	{"invalid code: must not begin with 0xef", services.ErrExecutionReverted},
	{"contract address collision", services.ErrExecutionReverted},
	{"insufficient balance for transfer", services.ErrExecutionReverted}, // an inner CALL's value
	{"bad instruction", services.ErrExecutionReverted},                   // Nethermind, OpenEthereum
	{"badinstruction", services.ErrExecutionReverted},
	// anvil (and revm-based nodes): a halt as "EVM error " and revm's name for it
	// (InvalidFEOpcode, OpcodeNotFound, StackUnderflow, InvalidJump, OutOfGas(...), ...).
	{"evm error", services.ErrExecutionReverted},
}

// cappedEstimatePhrases: the estimate failed within the allowance it was given. geth caps
// the allowance at the gas the call names, and at what the sender's balance pays at the fee
// it names; "gas required exceeds allowance" is then a call that ran out of gas at the cap
// (which may be the sender's funds, not the call), and "intrinsic gas too low" a cap below
// what the transaction costs before it runs.
var cappedEstimatePhrases = []errorPhrase{
	{"gas required exceeds", services.ErrGasCapped},
	{"intrinsic gas too low", services.ErrGasCapped},
}

// estimateFundsPhrases: the signer cannot pay for the call at all (its value, or its gas
// at the fees it named). Checked after reverts: a contract may revert with these words.
var estimateFundsPhrases = []errorPhrase{
	{"insufficient funds", services.ErrInsufficientFunds},
	{"insufficientfunds", services.ErrInsufficientFunds},
}

// classifyEstimateError tells a call that can never succeed as asked (a revert or another
// EVM failure: ErrExecutionReverted; a signer that cannot pay: ErrInsufficientFunds) from a
// node that failed to answer, which is all that is left unclassified.
func classifyEstimateError(err error) error {
	var rpcErr rpc.Error
	isRevert := errors.As(err, &rpcErr) && rpcErr.ErrorCode() == revertCode
	message := strings.ToLower(err.Error())
	if !isRevert && !containsWordPrefix(message, "revert") {
		if class := matchPhrase(message, estimateFundsPhrases); class != nil {
			return fmt.Errorf("%w: %w", class, err)
		}
		if capped := matchPhrase(message, cappedEstimatePhrases); capped != nil && rpcAnswered(err) {
			if class := matchPhrase(message, executionFailurePhrases); class != nil {
				return fmt.Errorf("%w: %w: %w", class, capped, err)
			}
			return fmt.Errorf("%w: %w", capped, err)
		}
		if class := matchPhrase(message, executionFailurePhrases); class != nil && rpcAnswered(err) {
			return fmt.Errorf("%w: %w", class, err)
		}
		return fmt.Errorf("eth_estimateGas: %w", err)
	}
	// Custom Solidity errors come back as "execution reverted" plus only the encoded data;
	// keep the data visible because it is the only clue to which error fired.
	var dataErr rpc.DataError
	if errors.As(err, &dataErr) {
		if data, ok := dataErr.ErrorData().(string); ok && data != "" && data != "0x" && !strings.Contains(err.Error(), data) {
			return fmt.Errorf("%w: %w (revert data %s)", services.ErrExecutionReverted, err, data)
		}
	}
	return fmt.Errorf("%w: %w", services.ErrExecutionReverted, err)
}

// rpcAnswered: the error is the node's own JSON-RPC answer, not a transport failure whose
// text happens to contain an EVM phrase (a proxy's "out of gas" page is still a 503).
func rpcAnswered(err error) bool {
	var rpcErr rpc.Error
	return errors.As(err, &rpcErr)
}

// JSON-RPC codes meaning "this node lacks the method or does not understand the argument".
const (
	codeMethodNotFound = -32601
	codeInvalidParams  = -32602
	codeUnknownBlock   = -39001 // Nethermind, Erigon
)

var notSupportedPhrases = []string{
	"finalized block not found", // geth before the merge or before the first finalization
	"unknown block",
	"invalid block",
	"not supported",
	"unsupported",
	"does not exist", // geth: "the method X does not exist/is not available"
	"method not found",
}

// isNotSupported is true only for errors the node itself sent back; an HTTP 404 from a
// wrong URL must not read as "this node has no finalized tag".
func isNotSupported(err error) bool {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	switch rpcErr.ErrorCode() {
	case codeMethodNotFound, codeInvalidParams, codeUnknownBlock:
		return true
	}
	message := strings.ToLower(rpcErr.Error())
	for _, phrase := range notSupportedPhrases {
		if containsWordPrefix(message, phrase) {
			return true
		}
	}
	return false
}

// isMethodNotFound: the node itself answered that it has no such method: the JSON-RPC code
// for it, or a message that names the method as unknown (geth: "the method X does not
// exist/is not available"; some providers answer "unsupported method: X" with another code).
func isMethodNotFound(err error, method string) bool {
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	if rpcErr.ErrorCode() == codeMethodNotFound {
		return true
	}
	message := strings.ToLower(rpcErr.Error())
	return containsWordPrefix(message, "method not found") ||
		(strings.Contains(message, strings.ToLower(method)) &&
			(containsWordPrefix(message, "does not exist") || containsWordPrefix(message, "not available") ||
				containsWordPrefix(message, "unsupported") || containsWordPrefix(message, "not supported")))
}

func matchPhrase(message string, phrases []errorPhrase) error {
	message = strings.ToLower(message)
	for _, p := range phrases {
		if containsWordPrefix(message, p.phrase) {
			return p.class
		}
	}
	return nil
}

// containsWordPrefix reports whether phrase occurs in message at the start of a word.
func containsWordPrefix(message, phrase string) bool {
	for offset := 0; ; {
		i := strings.Index(message[offset:], phrase)
		if i < 0 {
			return false
		}
		at := offset + i
		if before, _ := utf8.DecodeLastRuneInString(message[:at]); at == 0 || !isWordChar(before) {
			return true
		}
		offset = at + 1
	}
}

func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_'
}
