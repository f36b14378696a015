package repositories

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
)

// intentPayload is managed_tx.payload: the intent as the client gave it plus the gas limit
// actually used.
type intentPayload struct {
	To                   *string `json:"to,omitempty"`
	Value                string  `json:"value"`
	Data                 string  `json:"data,omitempty"`
	GasLimit             uint64  `json:"gasLimit"`
	EffectiveGasLimit    uint64  `json:"effectiveGasLimit"`
	MaxFeePerGas         *string `json:"maxFeePerGas,omitempty"`
	MaxPriorityFeePerGas *string `json:"maxPriorityFeePerGas,omitempty"`
}

// receiptPayload is managed_tx.receipt: the minimal evidence of a mined attempt.
type receiptPayload struct {
	TxHash      string `json:"txHash"`
	Status      uint64 `json:"status"`
	BlockNumber uint64 `json:"blockNumber"`
	BlockHash   string `json:"blockHash"`
	GasUsed     uint64 `json:"gasUsed"`
	// EffectiveGasPrice and L1Fee are wei in decimal ("" when the node did not give them).
	EffectiveGasPrice string `json:"effectiveGasPrice,omitempty"`
	L1Fee             string `json:"l1Fee,omitempty"`
	// Kind of the mined attempt: a CANCEL or PLACEHOLDER that was mined did not run the
	// client's intent.
	Kind string `json:"kind,omitempty"`
}

func encodePayload(tx domain.ManagedTx) ([]byte, error) {
	p := intentPayload{
		Value:             tx.Intent.Value.String(),
		GasLimit:          tx.Intent.GasLimit,
		EffectiveGasLimit: tx.EffectiveGasLimit,
	}
	if tx.Intent.To != nil {
		to := tx.Intent.ToText()
		p.To = &to
	}
	if len(tx.Intent.Data) > 0 {
		p.Data = hexutil.Encode(tx.Intent.Data)
	}
	if tx.Intent.MaxFeePerGas != nil {
		s := tx.Intent.MaxFeePerGas.String()
		p.MaxFeePerGas = &s
	}
	if tx.Intent.MaxPriorityFeePerGas != nil {
		s := tx.Intent.MaxPriorityFeePerGas.String()
		p.MaxPriorityFeePerGas = &s
	}
	return json.Marshal(p)
}

// weiOrEmpty is v in decimal, or "" (stored as NULL) when it is not known.
func weiOrEmpty(v *big.Int) string {
	if v == nil {
		return ""
	}
	return v.String()
}

func decodeWei(s string) (*big.Int, error) {
	v, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return nil, fmt.Errorf("bad wei amount %q", s)
	}
	return v, nil
}

// decodeCost reads a stored receipt's effective gas price and L1 fee (wei in decimal; ""
// when the node did not give them, nil then).
func decodeCost(effectiveGasPrice, l1Fee string) (price, l1 *big.Int, err error) {
	if effectiveGasPrice != "" {
		if price, err = decodeWei(effectiveGasPrice); err != nil {
			return nil, nil, fmt.Errorf("effective gas price: %w", err)
		}
	}
	if l1Fee != "" {
		if l1, err = decodeWei(l1Fee); err != nil {
			return nil, nil, fmt.Errorf("L1 fee: %w", err)
		}
	}
	return price, l1, nil
}

// toDomainRows maps managed_tx rows, in order.
func toDomainRows(rows []sqlcdb.ManagedTx) ([]domain.ManagedTx, error) {
	out := make([]domain.ManagedTx, 0, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out = append(out, tx)
	}
	return out, nil
}

// toDomain maps a managed_tx row.
func toDomain(row sqlcdb.ManagedTx) (domain.ManagedTx, error) {
	tx := domain.ManagedTx{
		ID:             row.TxID,
		ChainID:        uint64(row.ChainID),
		Signer:         common.HexToAddress(row.Signer),
		SignerHex:      row.Signer,
		RequestID:      row.RequestID.String,
		Nonce:          uint64(row.Nonce),
		State:          domain.State(row.State),
		SubState:       domain.SubState(row.SubState.String),
		SubmitAttempts: int(row.SubmitAttempts),
		LastError:      row.LastError.String,
		LastSubmitAt:   row.LastSubmitAt,
		NextResubmitAt: row.NextResubmitAt,
		ConfirmedAt:    row.ConfirmedAt,
		FencingToken:   uint64(row.FencingToken),
		CreatedAt:      row.CreatedAt,
		UpdatedAt:      row.UpdatedAt,
		RecoveredAt:    row.RecoveredAt,
		UnclaimedUntil: row.UnclaimedUntil,
	}
	copy(tx.Fingerprint[:], row.IntentHash)
	if row.TxHash.Valid {
		h := common.HexToHash(row.TxHash.String)
		tx.TxHash = &h
	}
	intent, err := decodeIntent(row.Payload)
	if err != nil {
		return tx, fmt.Errorf("decode payload of %s: %w", row.TxID, err)
	}
	tx.Intent, tx.EffectiveGasLimit = intent.Intent, intent.EffectiveGasLimit
	if len(row.Receipt) > 0 {
		var r receiptPayload
		if err := json.Unmarshal(row.Receipt, &r); err != nil {
			return tx, fmt.Errorf("decode receipt of %s: %w", row.TxID, err)
		}
		tx.Receipt = &domain.ReceiptSummary{
			TxHash: common.HexToHash(r.TxHash), Status: r.Status, BlockNumber: r.BlockNumber,
			BlockHash: common.HexToHash(r.BlockHash), GasUsed: r.GasUsed,
		}
		if tx.Receipt.EffectiveGasPrice, tx.Receipt.L1Fee, err = decodeCost(r.EffectiveGasPrice, r.L1Fee); err != nil {
			return tx, fmt.Errorf("decode receipt of %s: %w", row.TxID, err)
		}
	}
	return tx, nil
}

// decodedIntent is managed_tx.payload decoded.
type decodedIntent struct {
	domain.Intent
	EffectiveGasLimit uint64
}

// decodeIntent decodes managed_tx.payload.
func decodeIntent(payload []byte) (decodedIntent, error) {
	var p intentPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		return decodedIntent{}, err
	}
	d, err := intentFromFields(intentPayloadFields{hasTo: p.To != nil, to: deref(p.To), value: p.Value, data: p.Data, maxFee: deref(p.MaxFeePerGas),
		maxTip: deref(p.MaxPriorityFeePerGas)})
	d.GasLimit, d.EffectiveGasLimit = p.GasLimit, p.EffectiveGasLimit
	return d, err
}

// intentPayloadFields are managed_tx.payload's fields as text, "" for one it lacks (a query
// that reads them out of the payload itself, ListAllocated, gives them so). gasLimit and
// effectiveGasLimit are decimal; "" reads as 0. hasTo tells a recipient left out (a contract
// creation) from one written empty.
type intentPayloadFields struct {
	hasTo                                                        bool
	to, value, data, gasLimit, effectiveGasLimit, maxFee, maxTip string
}

// errEmptyRecipient: a payload names an empty recipient, which intentPayload never writes;
// read as the zero address or as a contract creation, it would send the value elsewhere.
var errEmptyRecipient = errors.New("the payload's recipient is empty")

// intentFromFields decodes a payload's fields; intentPayload writes none of them empty, so
// "" is a field it left out.
func intentFromFields(f intentPayloadFields) (decodedIntent, error) {
	var (
		d   decodedIntent
		err error
	)
	if d.Value, err = decodeWei(f.value); err != nil {
		return d, err
	}
	if f.hasTo {
		if f.to == "" {
			return d, errEmptyRecipient
		}
		to := common.HexToAddress(f.to)
		d.To, d.ToHex = &to, f.to
	}
	if f.data != "" {
		if d.Data, err = hexutil.Decode(f.data); err != nil {
			return d, fmt.Errorf("decode data: %w", err)
		}
	}
	if d.GasLimit, err = decodeGas(f.gasLimit); err != nil {
		return d, err
	}
	if d.EffectiveGasLimit, err = decodeGas(f.effectiveGasLimit); err != nil {
		return d, err
	}
	if f.maxFee != "" {
		if d.MaxFeePerGas, err = decodeWei(f.maxFee); err != nil {
			return d, err
		}
	}
	if f.maxTip != "" {
		if d.MaxPriorityFeePerGas, err = decodeWei(f.maxTip); err != nil {
			return d, err
		}
	}
	return d, nil
}

// decodeGas reads a gas limit in decimal ("" reads as 0).
func decodeGas(s string) (uint64, error) {
	if s == "" {
		return 0, nil
	}
	gas, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("decode gas limit: %w", err)
	}
	return gas, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
