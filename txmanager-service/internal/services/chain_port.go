package services

import (
	"context"
	"errors"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// ChainID is the id of the chain every transaction is signed for, read once when the
// service connects to the chain.
type ChainID struct{ *big.Int }

// The chain ports. Each consumer names only what it uses (the writer a nonce, the funds
// check a balance and fees, the receipts stage receipts and headers, reconciliation the
// signer's history), so a stage's dependencies read off its constructor and a test of it
// needs no more of a node than that. Chain is all of them: what the adapters
// (internal/chain: JSON-RPC endpoints behind one MultiChain, the embedded simulated chain)
// implement and the assembly hands out.

// NonceSource is the chain's view of a signer's next nonce.
type NonceSource interface {
	// PendingNonceAt is eth_getTransactionCount(account, "pending").
	PendingNonceAt(ctx context.Context, account common.Address) (uint64, error)
}

// highestPendingSource is a chain that asks every endpoint for a pending nonce (MultiChain).
type highestPendingSource interface {
	HighestPendingNonceAt(ctx context.Context, account common.Address) (uint64, error)
}

// HighestPendingNonce is the account's pending nonce as the highest endpoint of chain
// reports it, where the chain has several. A question whose answer decides that nonces are
// free (quarantine after a database loss) must take it: lost transactions may wait in one
// node's pool only.
func HighestPendingNonce(ctx context.Context, chain NonceSource, account common.Address) (uint64, error) {
	if multi, ok := chain.(highestPendingSource); ok {
		return multi.HighestPendingNonceAt(ctx, account)
	}
	return chain.PendingNonceAt(ctx, account)
}

// FeeSource is what the market asks of a transaction now.
type FeeSource interface {
	// SuggestFees returns the latest base fee and a suggested priority fee (EIP-1559).
	SuggestFees(ctx context.Context) (FeeSuggestion, error)
}

// BalanceSource reads what a signer holds.
type BalanceSource interface {
	// BalanceAt is eth_getBalance(account, "latest") in wei.
	BalanceAt(ctx context.Context, account common.Address) (*big.Int, error)
	// AccountAt reads the account's balance and nonce at one block, the latest of the
	// endpoint that answers. Read together, they tell which transactions the balance has
	// paid for even when that endpoint trails the one the receipts came from.
	AccountAt(ctx context.Context, account common.Address) (AccountState, error)
}

// AccountState is an account at one block: its balance, and its nonce (how many of its
// transactions the chain had included up to that block).
type AccountState struct {
	Balance *big.Int
	Nonce   uint64
	Block   uint64
}

// CallSimulator runs an intent before it gets a nonce.
type CallSimulator interface {
	// EstimateGas runs eth_estimateGas. A call that cannot run (a revert, an invalid opcode,
	// out of gas at any limit) returns an error matching ErrExecutionReverted with the node's
	// message; one the sender cannot pay for matches ErrInsufficientFunds; one that failed
	// within a capped allowance matches ErrGasCapped too.
	EstimateGas(ctx context.Context, call CallRequest) (uint64, error)
	// Usable is nil while some endpoint can be called, or says why none can (matching
	// ErrNoChainEndpoint), so work that needs the chain is refused at once instead of
	// after a deadline.
	Usable() error
	// SuggestFees reads the chain's latest fees and block gas limit (shared between
	// callers for a moment: a create asks for the block gas limit of large intents).
	SuggestFees(ctx context.Context) (FeeSuggestion, error)
}

// TxSender hands signed transactions to the node.
type TxSender interface {
	// SendRawTransactions broadcasts many in as few round trips as possible (JSON-RPC
	// batches, in order); the result has one classified error (or nil) per transaction:
	// errors.Is works against the answer classes of chain_outcomes.go, anything else is
	// returned as it came. An error for the whole call means none of them can be assumed
	// sent or unsent.
	SendRawTransactions(ctx context.Context, raws [][]byte) ([]error, error)
	// TransactionsKnown reports, per hash, whether the node knows the transaction (pending
	// in its pool or mined): how "nonce too low" after a lost response is told apart from a
	// nonce taken by some other transaction, without guessing.
	TransactionsKnown(ctx context.Context, hashes []common.Hash) ([]bool, error)
}

// HeadSource reads the chain's head.
type HeadSource interface {
	// LatestHeader is the current head.
	LatestHeader(ctx context.Context) (*BlockHeader, error)
}

// ReceiptLookup finds transactions' receipts by hash.
type ReceiptLookup interface {
	// TransactionReceipts looks up many receipts in as few round trips as possible (JSON-RPC
	// batch calls). The result has one entry per hash, nil where the node has no receipt yet.
	// An error for the whole call (transport) is returned as error; per-hash lookup errors
	// other than "not found" are returned in the per-hash Err field.
	TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]ReceiptResult, error)
}

// ReceiptSource is what following transactions to a final state reads.
type ReceiptSource interface {
	HeadSource
	ReceiptLookup
	// BlockReceipts returns every receipt of each block (one call per block, batched): with
	// many transactions in flight, far cheaper for the node than one look-up per hash. A
	// block the node does not have yet is nil; ErrNotSupported where the node lacks the call.
	BlockReceipts(ctx context.Context, numbers []uint64) ([][]Receipt, error)
	// HeadersByNumber returns the canonical block headers at the given heights, batched.
	// A height beyond the head yields a nil entry.
	HeadersByNumber(ctx context.Context, numbers []uint64) ([]*BlockHeader, error)
	// FinalizedHeader is the node's "finalized" block; ErrNotSupported where the node has
	// no such tag.
	FinalizedHeader(ctx context.Context) (*BlockHeader, error)
}

// SentFinder finds a sender's transactions at given nonces among the recent blocks.
type SentFinder interface {
	// SentTransactions finds the sender's transactions at the given nonces, pending or in
	// the latest maxBlocks blocks; nonces it did not find are absent from the result.
	SentTransactions(ctx context.Context, from common.Address, nonces []uint64, maxBlocks uint64) (map[uint64]SentTx, error)
}

// ChainHistory is what reconciling the database with the chain reads: a signer's nonce now
// and at past blocks, and its transactions wherever they are.
type ChainHistory interface {
	NonceSource
	HeadSource
	// FinalizedHeader is the node's "finalized" block; ErrNotSupported where the node has
	// no such tag.
	FinalizedHeader(ctx context.Context) (*BlockHeader, error)
	// HeadersByNumber returns the canonical block headers at the given heights, batched (a
	// height beyond the head yields nil): whether a block a transaction was found in is
	// still the chain's.
	HeadersByNumber(ctx context.Context, numbers []uint64) ([]*BlockHeader, error)
	// GasEstimator prices the self-transfers that fill nonce holes (TransferGas).
	GasEstimator
	ReceiptLookup
	SentFinder
	// ScanSent reads up to maxBlocks blocks from first on, oldest first, and returns the
	// sender's transactions at nonces from fromNonce on in chain order: how transactions
	// older than any window behind the head are found. It ends with the block in which limit
	// transactions were collected, or at the head.
	ScanSent(ctx context.Context, from common.Address, first, maxBlocks, fromNonce uint64, limit int) (SentScan, error)
	// NonceAtBlock is the account's nonce after the given block (its transactions mined up to
	// it); a node that keeps only recent state refuses old blocks.
	NonceAtBlock(ctx context.Context, account common.Address, block uint64) (uint64, error)
}

// Chain is every port to an EVM node at once.
type Chain interface {
	NonceSource
	FeeSource
	BalanceSource
	CallSimulator
	TxSender
	ReceiptSource
	ChainHistory
}

// SentTx is a transaction of a signer the chain holds at some nonce.
type SentTx struct {
	Hash           common.Hash
	Nonce          uint64
	To             *common.Address
	Value          *big.Int
	Data           []byte
	Gas            uint64
	MaxFee, MaxTip *big.Int
	// BlockNumber is 0 while it is pending; BlockHash is the hash of the block that held
	// it when it was read (zero while pending).
	BlockNumber uint64
	BlockHash   common.Hash
	// Raw is its signed encoding.
	Raw []byte
}

// SentScan is what a forward scan of blocks found of one sender.
type SentScan struct {
	// Txs are the sender's transactions found, in chain order.
	Txs []SentTx
	// Next is the first block the scan did not read: where the next one resumes.
	Next uint64
	// Head is the chain's head the scan read up to at most.
	Head uint64
}

// CallRequest is what eth_estimateGas needs.
type CallRequest struct {
	From                 common.Address
	To                   *common.Address // nil: contract creation
	Value                *big.Int
	Data                 []byte
	Gas                  uint64 // 0: let the node choose
	MaxFeePerGas         *big.Int
	MaxPriorityFeePerGas *big.Int
}

// FeeSuggestion is the node's view of current fees.
type FeeSuggestion struct {
	BaseFee *big.Int // of the latest block
	TipCap  *big.Int // suggested max priority fee per gas
	// Legacy: the latest block has no base fee (a chain without EIP-1559); transactions
	// carry one GasPrice.
	Legacy   bool
	GasPrice *big.Int
	// BlockGasLimit is the latest block's gas limit (0: not known): no transaction above it
	// can be mined.
	BlockGasLimit uint64
}

// BlockHeader is the part of a header finality needs.
type BlockHeader struct {
	Number     uint64
	Hash       common.Hash
	ParentHash common.Hash
	Time       uint64
}

// Receipt is the part of a receipt the service stores.
type Receipt struct {
	TxHash            common.Hash
	Status            uint64 // 1 success, 0 failure
	BlockNumber       uint64
	BlockHash         common.Hash
	TransactionIndex  uint
	GasUsed           uint64
	EffectiveGasPrice *big.Int
	ContractAddress   *common.Address
	// L1Fee is the L1 data fee an OP-stack chain charged (nil where the node does not say).
	L1Fee *big.Int
}

// ReceiptResult is one entry of a batched receipt look-up.
type ReceiptResult struct {
	Receipt *Receipt // nil when not found (not yet mined, or dropped)
	Err     error    // a lookup error other than not-found
}

// Classified chain errors (the answer classes of a broadcast are in chain_outcomes.go).
var (
	ErrExecutionReverted = errors.New("chain: execution reverted")
	ErrNotSupported      = errors.New("chain: not supported by this node")
	// ErrGasCapped: an estimate failed within a cap on the gas it could try (the gas the
	// call named, or what the sender's balance pays at the fee it named) that a larger
	// allowance might have met. With ErrExecutionReverted where the call ran out of gas at
	// the cap, alone where the cap was below even the transaction's intrinsic gas.
	ErrGasCapped = errors.New("chain: the estimate's gas allowance was capped")
	// ErrNoChainEndpoint: no endpoint answered in time (or none is usable now); the call
	// may succeed later.
	ErrNoChainEndpoint = errors.New("chain: no endpoint answered")
)
