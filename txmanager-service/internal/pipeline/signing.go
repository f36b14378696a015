package pipeline

import (
	"context"
	"fmt"
	"math/big"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Unsigned is one attempt's transaction before signing.
type Unsigned struct {
	From           common.Address
	Nonce          uint64
	To             *common.Address
	Value          *big.Int
	Data           []byte
	Gas            uint64
	MaxFee, MaxTip *big.Int
	// Legacy signs a transaction with one gas price (MaxFee) for a chain without a base fee.
	Legacy bool
	// BaseFee is the latest block's base fee the fees were priced against (nil: not known),
	// kept with the attempt so an operator sees each attempt's fee beside the market's.
	BaseFee *big.Int
}

// Signer signs attempts for the chain the pipeline serves.
type Signer struct {
	chainID services.ChainID
	keys    services.TxSigner
}

// NewSigner signs with keys for chainID.
func NewSigner(chainID services.ChainID, keys services.TxSigner) *Signer {
	return &Signer{chainID: chainID, keys: keys}
}

// Sign signs u (EIP-1559, or legacy) as an attempt of kind for the transaction txID.
func (s *Signer) Sign(ctx context.Context, txID uuid.UUID, kind AttemptKind, u Unsigned) (SignedAttempt, error) {
	unsigned := types.NewTx(&types.DynamicFeeTx{
		ChainID: s.chainID.Int, Nonce: u.Nonce, GasTipCap: u.MaxTip, GasFeeCap: u.MaxFee, Gas: u.Gas, To: u.To, Value: u.Value, Data: u.Data,
	})
	if u.Legacy {
		unsigned = types.NewTx(&types.LegacyTx{Nonce: u.Nonce, GasPrice: u.MaxFee, Gas: u.Gas, To: u.To, Value: u.Value, Data: u.Data})
	}
	signed, err := s.keys.SignTx(ctx, u.From, unsigned, s.chainID.Int)
	if err != nil {
		return SignedAttempt{}, &services.KeySourceError{Err: err}
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return SignedAttempt{}, err
	}
	return SignedAttempt{TxID: txID, Hash: signed.Hash(), Nonce: u.Nonce, Kind: kind, MaxFee: u.MaxFee, MaxTip: u.MaxTip, BaseFee: u.BaseFee, GasLimit: u.Gas, Raw: raw}, nil
}

// ToSign is one transaction of a batch to sign: its attempt kind and unsigned form.
type ToSign struct {
	TxID     uuid.UUID
	Kind     AttemptKind
	Unsigned Unsigned
}

// SignInOrder signs a batch of one signer's transactions, given in nonce order, with up to
// concurrency signatures in flight: a remote key (a cloud KMS, clef) answers in tens of
// milliseconds, so one signature at a time would cap a signer at a few dozen transactions
// a second. It returns the signed attempts of the longest run from the
// batch's start that signed, in order, and the first failure after that run (nil when
// every one signed). A failure holds back only what follows it: a nonce above an
// unsigned one is no use to the node, so those are not returned (they are signed again
// on the next pass), and those not yet started when it fails are not asked for at all.
//
// A key source with a limit of its own (services.SigningPace: clef takes a few at a
// time) gets no more than that.
func (s *Signer) SignInOrder(ctx context.Context, batch []ToSign, concurrency int) ([]SignedAttempt, error) {
	if paced, ok := s.keys.(services.SigningPace); ok && len(batch) > 0 {
		if limit := paced.MaxInFlight(batch[0].Unsigned.From); limit > 0 {
			concurrency = min(concurrency, limit)
		}
	}
	attempts := make([]SignedAttempt, len(batch))
	var (
		mu        sync.Mutex
		next      int          // index of the next transaction to start; taken in order
		firstFail = len(batch) // lowest index that failed
		failure   error        // its error
		wg        sync.WaitGroup
	)
	// take gives the next index to sign, or false when none is left or a lower one failed.
	take := func() (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		if next >= len(batch) || next > firstFail {
			return 0, false
		}
		next++
		return next - 1, true
	}
	work := func() {
		for i, ok := take(); ok; i, ok = take() {
			item := batch[i]
			attempt, err := s.Sign(ctx, item.TxID, item.Kind, item.Unsigned)
			mu.Lock()
			attempts[i] = attempt
			if err != nil && i < firstFail {
				firstFail, failure = i, fmt.Errorf("sign %s (nonce %d): %w", item.TxID, item.Unsigned.Nonce, err)
			}
			mu.Unlock()
		}
	}
	for range min(max(concurrency, 1), len(batch)) {
		wg.Go(work)
	}
	wg.Wait()
	return attempts[:firstFail], failure
}

// Decode reads a signed attempt's transaction back as it was signed: sender, nonce,
// recipient, value, data, gas and type (its fees are the caller's to change).
func (s *Signer) Decode(raw []byte) (Unsigned, error) {
	var tx types.Transaction
	if err := tx.UnmarshalBinary(raw); err != nil {
		return Unsigned{}, fmt.Errorf("decode attempt: %w", err)
	}
	from, err := types.Sender(types.LatestSignerForChainID(s.chainID.Int), &tx)
	if err != nil {
		return Unsigned{}, fmt.Errorf("sender of attempt: %w", err)
	}
	return Unsigned{From: from, Nonce: tx.Nonce(), To: tx.To(), Value: tx.Value(), Data: tx.Data(), Gas: tx.Gas(),
		MaxFee: tx.GasFeeCap(), MaxTip: tx.GasTipCap(), Legacy: tx.Type() == types.LegacyTxType}, nil
}
