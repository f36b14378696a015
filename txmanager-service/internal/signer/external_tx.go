package signer

import (
	"bytes"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

// ErrSignedTxMismatch: an external signer returned a transaction other than the one asked
// for, or one not signed by the requested account.
var ErrSignedTxMismatch = errors.New("signed transaction does not match the request")

// sendTxArgs renders tx as clef's account_signTransaction argument. Clef rebuilds the
// transaction from these fields (SendTxArgs.ToTransaction) and picks the type from which
// fee fields are set, so each type sets exactly its own.
func sendTxArgs(from common.Address, tx *types.Transaction, chainID *big.Int) (*apitypes.SendTxArgs, error) {
	if tx == nil {
		return nil, errors.New("nil transaction")
	}
	if err := checkChainID(chainID); err != nil {
		return nil, err
	}
	if tx.Type() != types.LegacyTxType && tx.ChainId().Sign() != 0 && tx.ChainId().Cmp(chainID) != 0 {
		return nil, fmt.Errorf("transaction is for chain %s, asked to sign for chain %s", tx.ChainId(), chainID)
	}
	input := hexutil.Bytes(tx.Data())
	args := &apitypes.SendTxArgs{
		From:    common.NewMixedcaseAddress(from),
		Gas:     hexutil.Uint64(tx.Gas()),
		Value:   hexutil.Big(*tx.Value()),
		Nonce:   hexutil.Uint64(tx.Nonce()),
		Input:   &input,
		ChainID: (*hexutil.Big)(chainID),
	}
	if to := tx.To(); to != nil {
		mixed := common.NewMixedcaseAddress(*to)
		args.To = &mixed
	}
	// A nil access list would be sent as JSON null, which clef reads as "no access list"
	// and so signs a legacy transaction instead; send [] instead.
	accessList := tx.AccessList()
	if accessList == nil {
		accessList = types.AccessList{}
	}
	switch tx.Type() {
	case types.LegacyTxType:
		args.GasPrice = (*hexutil.Big)(tx.GasPrice())
	case types.AccessListTxType:
		args.GasPrice = (*hexutil.Big)(tx.GasPrice())
		args.AccessList = &accessList
	case types.DynamicFeeTxType:
		args.MaxFeePerGas = (*hexutil.Big)(tx.GasFeeCap())
		args.MaxPriorityFeePerGas = (*hexutil.Big)(tx.GasTipCap())
		args.AccessList = &accessList
	default:
		// Blob sidecars and EIP-7702 authorizations do not fit SendTxArgs faithfully.
		return nil, fmt.Errorf("transaction type %d is not supported by the external signer", tx.Type())
	}
	return args, nil
}

// checkSignedTx decodes the signer's raw reply and accepts it only if it is asked, for
// chainID, signed by from. Fields are compared one by one to name what changed. Equal
// signing hashes then cover every other field, including ones a future type might add;
// the hash is computed with our chain id, not the reply's, so that one is compared alone.
func checkSignedTx(raw []byte, asked *types.Transaction, from common.Address, chainID *big.Int) (*types.Transaction, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: reply has no raw transaction", ErrSignedTxMismatch)
	}
	signed := new(types.Transaction)
	if err := signed.UnmarshalBinary(raw); err != nil {
		return nil, fmt.Errorf("%w: raw transaction does not decode: %w", ErrSignedTxMismatch, err)
	}
	signer := types.LatestSignerForChainID(chainID)
	var changed []string
	compare := func(field string, same bool) {
		if !same {
			changed = append(changed, field)
		}
	}
	compare("type", signed.Type() == asked.Type())
	compare("chain id", signed.ChainId().Cmp(chainID) == 0)
	compare("nonce", signed.Nonce() == asked.Nonce())
	compare("to", equalRecipient(signed.To(), asked.To()))
	compare("value", signed.Value().Cmp(asked.Value()) == 0)
	compare("data", bytes.Equal(signed.Data(), asked.Data()))
	compare("gas", signed.Gas() == asked.Gas())
	compare("gas fee cap", signed.GasFeeCap().Cmp(asked.GasFeeCap()) == 0)
	compare("gas tip cap", signed.GasTipCap().Cmp(asked.GasTipCap()) == 0)
	compare("access list", slices.EqualFunc(signed.AccessList(), asked.AccessList(), equalAccessTuple))
	compare("signing hash", signer.Hash(signed) == signer.Hash(asked))
	if len(changed) > 0 {
		return nil, fmt.Errorf("%w: %s changed", ErrSignedTxMismatch, strings.Join(changed, ", "))
	}
	sender, err := types.Sender(signer, signed)
	if err != nil {
		return nil, fmt.Errorf("%w: signature does not verify: %w", ErrSignedTxMismatch, err)
	}
	if sender != from {
		return nil, fmt.Errorf("%w: signed by %s, not %s", ErrSignedTxMismatch, sender.Hex(), from.Hex())
	}
	return signed, nil
}

func equalRecipient(a, b *common.Address) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

func equalAccessTuple(a, b types.AccessTuple) bool {
	return a.Address == b.Address && slices.Equal(a.StorageKeys, b.StorageKeys)
}
