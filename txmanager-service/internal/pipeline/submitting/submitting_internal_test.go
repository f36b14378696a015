package submitting

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

func TestClaimedItems(t *testing.T) {
	a, b, c := uuid.New(), uuid.New(), uuid.New()
	due := []DueResubmit{
		{TxID: a, Raw: []byte("a"), AllHashes: []common.Hash{{1}}},
		{TxID: b, Raw: []byte("b"), AllHashes: []common.Hash{{2}, {3}}},
		{TxID: c, Raw: []byte("c")},
	}
	items := claimedItems(due, []uuid.UUID{c, b})
	if len(items) != 2 || items[0].TxID != b || items[1].TxID != c {
		t.Fatalf("items %+v: want b then c, in the listed (nonce) order", items)
	}
	if !slices.Equal(items[0].Ours, []common.Hash{{2}, {3}}) || string(items[0].Raw) != "b" {
		t.Errorf("item b = %+v: want its bytes and every hash of ours", items[0])
	}
	if none := claimedItems(due, nil); len(none) != 0 {
		t.Errorf("nothing claimed, yet %d items", len(none))
	}
}

// A replacement goes out in place of the current bytes only when the store took it as the
// transaction's current attempt; the old hashes stay ours.
func TestWithReplacements(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	items := []pipeline.BroadcastItem{{TxID: a, Raw: []byte("a0"), Ours: []common.Hash{{0xa0}}}, {TxID: b, Raw: []byte("b0"), Ours: []common.Hash{{0xb0}}}}
	replacements := []Replacement{
		{Replaced: common.Hash{0xa0}, Attempt: pipeline.SignedAttempt{TxID: a, Hash: common.Hash{0xa1}, Raw: []byte("a1")}},
		{Replaced: common.Hash{0xb0}, Attempt: pipeline.SignedAttempt{TxID: b, Hash: common.Hash{0xb1}, Raw: []byte("b1")}},
	}
	out, raised := withReplacements(items, replacements, []uuid.UUID{a})
	if string(out[0].Raw) != "a1" || !slices.Equal(out[0].Ours, []common.Hash{{0xa0}, {0xa1}}) {
		t.Errorf("a = %+v, want the replacement's bytes and both hashes", out[0])
	}
	if string(out[1].Raw) != "b0" || len(out[1].Ours) != 1 {
		t.Errorf("b = %+v, want it unchanged (the store did not take its replacement)", out[1])
	}
	if len(raised) != 1 || raised[0].TxID != a {
		t.Errorf("raised %+v, want a only", raised)
	}
	if string(items[0].Raw) != "a0" {
		t.Error("the items passed in were changed")
	}
}

// A re-priced attempt is the same transaction (nonce, recipient, value, data, gas, type)
// with the new fees; an original becomes a replacement, a cancellation stays one.
func TestResignKeepsTheTransaction(t *testing.T) {
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chainID := services.ChainID{Int: big.NewInt(1337)}
	signer := pipeline.NewSigner(chainID, signerFunc(func(tx *types.Transaction) (*types.Transaction, error) {
		return types.SignTx(tx, types.LatestSignerForChainID(chainID.Int), key)
	}))
	from := crypto.PubkeyToAddress(key.PublicKey)
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	s := &Submitter{signer: signer}
	for _, tc := range []struct {
		name     string
		legacy   bool
		kind     pipeline.AttemptKind
		wantKind pipeline.AttemptKind
	}{
		{"original, EIP-1559", false, pipeline.AttemptOriginal, pipeline.AttemptReplace},
		{"original, legacy", true, pipeline.AttemptOriginal, pipeline.AttemptReplace},
		{"cancel", false, pipeline.AttemptCancel, pipeline.AttemptCancel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, err := signer.Sign(t.Context(), uuid.New(), tc.kind, pipeline.Unsigned{From: from, Nonce: 4, To: &to, Value: big.NewInt(9),
				Data: []byte{0xca, 0xfe}, Gas: 50_000, MaxFee: big.NewInt(10), MaxTip: big.NewInt(1), Legacy: tc.legacy})
			if err != nil {
				t.Fatal(err)
			}
			again, err := s.resign(t.Context(), DueResubmit{TxID: first.TxID, Raw: first.Raw, Kind: tc.kind}, big.NewInt(20), big.NewInt(2), big.NewInt(9), 0)
			if err != nil {
				t.Fatal(err)
			}
			u, err := signer.Decode(again.Raw)
			if err != nil {
				t.Fatal(err)
			}
			if again.Kind != tc.wantKind || again.Hash == first.Hash || again.TxID != first.TxID {
				t.Errorf("attempt %+v", again)
			}
			if u.From != from || u.Nonce != 4 || *u.To != to || u.Value.Int64() != 9 || string(u.Data) != "\xca\xfe" || u.Gas != 50_000 ||
				u.Legacy != tc.legacy || u.MaxFee.Int64() != 20 {
				t.Errorf("re-signed transaction %+v", u)
			}
		})
	}
}

type signerFunc func(*types.Transaction) (*types.Transaction, error)

func (f signerFunc) SignTx(_ context.Context, _ common.Address, tx *types.Transaction, _ *big.Int) (*types.Transaction, error) {
	return f(tx)
}

// Each row of the outcome table decides what the next resubmission does with the fees of a
// transaction it answered for: the sub-state the row records is read back, and the
// reaction to its step is carried out. Two markets per row: unchanged since the attempt
// was priced (only an outbid replaces it) and risen above it (the market re-prices, unless
// the step keeps the fees).
func TestEveryAnswerDecidesTheNextResubmission(t *testing.T) {
	gwei := func(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(1_000_000_000)) }
	policy := services.FeePolicy{}
	prevFee, prevTip := gwei(22), gwei(2)
	unchanged := services.FeeSuggestion{BaseFee: gwei(10), TipCap: gwei(2)} // fresh: 22 / 2, the attempt's own
	risen := services.FeeSuggestion{BaseFee: gwei(80), TipCap: gwei(5)}     // fresh: 165 / 5
	type want struct{ unchanged, risen services.RepriceAction }
	byStep := map[services.NextStep]want{
		services.StepAwaitReceipt: {services.KeepFees, services.RaiseFees},
		services.StepRebroadcast:  {services.KeepFees, services.RaiseFees},
		services.StepReprice:      {services.RaiseFees, services.RaiseFees},
		services.StepWaitForFunds: {services.KeepFees, services.KeepFees},
		services.StepSettleNonce:  {services.KeepFees, services.KeepFees},
		services.StepHoldFees:     {services.KeepFees, services.KeepFees},
		services.StepCancel:       {services.KeepFees, services.KeepFees},
	}
	for _, step := range services.Steps() {
		if _, ok := resubmitReactions[step]; !ok {
			t.Errorf("step %q has no reaction at resubmission", step)
		}
		if _, ok := byStep[step]; !ok {
			t.Errorf("step %q has no case in this test", step)
		}
	}
	rows := services.ChainAnswers()
	rows = append(rows, services.AnswerRow{Outcome: services.OutcomeOf(errUnclassified, services.OwnershipNotAsked)})
	for _, row := range rows {
		sub := row.Outcome.SubState
		t.Run(fmt.Sprintf("%v/%d/%s", row.Class, row.Ownership, sub), func(t *testing.T) {
			w := byStep[row.Outcome.Next]
			for _, m := range []struct {
				name   string
				s      services.FeeSuggestion
				action services.RepriceAction
			}{{"market unchanged", unchanged, w.unchanged}, {"market risen", risen, w.risen}} {
				fee, tip, action := reactionTo(sub)(policy, prevFee, prevTip, m.s)
				if action != m.action {
					t.Errorf("%s: action %v, want %v (step %q)", m.name, action, m.action, row.Outcome.Next)
					continue
				}
				kept := fee.Cmp(prevFee) == 0 && tip.Cmp(prevTip) == 0
				if (action == services.KeepFees) != kept {
					t.Errorf("%s: fees %v/%v with action %v", m.name, fee, tip, action)
				}
			}
		})
	}
}

var errUnclassified = errors.New("502 bad gateway")

// fixedFees is a fee source with one suggestion.
type fixedFees struct {
	Chain
	s services.FeeSuggestion
}

func (f fixedFees) SuggestFees(context.Context) (services.FeeSuggestion, error) { return f.s, nil }

// replacementsStore stores every replacement it is given.
type replacementsStore struct {
	Store
	stored []Replacement
}

func (r *replacementsStore) RecordReplacements(_ context.Context, _ domain.Lease, replacements []Replacement) ([]uuid.UUID, error) {
	r.stored = append(r.stored, replacements...)
	ids := make([]uuid.UUID, len(replacements))
	for i, rep := range replacements {
		ids[i] = rep.Attempt.TxID
	}
	return ids, nil
}

// repriceAfterRefusals re-prices count transactions (nonces from 0, signed at fee cap 10,
// due with the market at 1,000 + 100) with a key source that refuses the re-signatures
// refuse names; it returns the items sent, the items as they were, and the replacements
// stored.
func repriceAfterRefusals(t *testing.T, count uint64, refuse func(nonce uint64) bool) (out, items []pipeline.BroadcastItem, stored int) {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chainID := services.ChainID{Int: big.NewInt(1337)}
	signer := pipeline.NewSigner(chainID, signerFunc(func(tx *types.Transaction) (*types.Transaction, error) {
		if tx.GasFeeCap().Int64() > 10 && refuse(tx.Nonce()) {
			return nil, errors.New("kms: deadline exceeded")
		}
		return types.SignTx(tx, types.LatestSignerForChainID(chainID.Int), key)
	}))
	from := crypto.PubkeyToAddress(key.PublicKey)
	var due []DueResubmit
	for nonce := range count {
		a, err := signer.Sign(t.Context(), uuid.New(), pipeline.AttemptOriginal, pipeline.Unsigned{From: from, Nonce: nonce, To: &from, Value: big.NewInt(1),
			Gas: 21_000, MaxFee: big.NewInt(10), MaxTip: big.NewInt(1)})
		if err != nil {
			t.Fatal(err)
		}
		due = append(due, DueResubmit{TxID: a.TxID, Current: a.Hash, Raw: a.Raw, Kind: a.Kind, MaxFee: big.NewInt(10), MaxTip: big.NewInt(1), SubState: domain.SubStateSubmitted})
		items = append(items, pipeline.BroadcastItem{TxID: a.TxID, Raw: a.Raw})
	}
	store := &replacementsStore{}
	s := &Submitter{signer: signer, store: store, chain: fixedFees{s: services.FeeSuggestion{BaseFee: big.NewInt(1_000), TipCap: big.NewInt(100)}},
		metrics: telemetry.Noop(), log: log.NewHelper(log.NewStdLogger(io.Discard))}
	out, err = s.reprice(t.Context(), domain.Lease{Signer: from.Hex(), Token: 1}, due, items)
	if err != nil {
		t.Fatalf("reprice: %v", err)
	}
	return out, items, len(store.stored)
}

// One transaction of a resubmission batch that cannot be re-signed now (its key source
// refuses) goes out at its current fees; the batch's others are re-priced and sent.
func TestRepriceGoesOnPastOneSigningFailure(t *testing.T) {
	const refuseNonce = 1
	out, items, stored := repriceAfterRefusals(t, 3, func(nonce uint64) bool { return nonce == refuseNonce })
	if stored != 2 || len(out) != 3 {
		t.Fatalf("%d replacements stored, %d items to send; want the 2 that could be re-signed, and all 3 sent", stored, len(out))
	}
	if string(out[refuseNonce].Raw) != string(items[refuseNonce].Raw) {
		t.Fatal("the one that could not be re-signed is not sent at its current fees")
	}
}

// A key source that fails every re-signature (down, or hanging to its deadline each time)
// costs a resubmission pass two failed signatures, not one per transaction: the rest go out
// at their current fees at once.
func TestRepriceStopsSigningWhenTheKeySourceKeepsFailing(t *testing.T) {
	var refused int
	out, items, stored := repriceAfterRefusals(t, 6, func(uint64) bool { refused++; return true })
	if refused != maxSigningFailuresInARow || stored != 0 || len(out) != len(items) {
		t.Fatalf("%d signatures tried and refused, %d replacements, %d sent; want %d tried, none replaced, all %d sent at their fees",
			refused, stored, len(out), maxSigningFailuresInARow, len(items))
	}
}
