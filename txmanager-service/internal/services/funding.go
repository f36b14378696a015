package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sync"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// FundingStore keeps signers' funding marks (migration 0023).
type FundingStore interface {
	Put(ctx context.Context, f domain.Funding, by string) error
	Get(ctx context.Context, chainID uint64, signer common.Address) (domain.Funding, error)
	List(ctx context.Context, chainID uint64) ([]domain.Funding, error)
	Delete(ctx context.Context, chainID uint64, signer common.Address) (bool, error)
	// Mark records one look at the signer's balance inside sess, locked, and answers the
	// state before and after it.
	Mark(ctx context.Context, sess txmanager.Session, chainID uint64, signer common.Address, balance *big.Int) (BalanceMark, error)
	// RecordRefill records the signer's refill in flight inside sess, if no other node
	// recorded its n-th.
	RecordRefill(ctx context.Context, sess txmanager.Session, chainID uint64, signer common.Address, txID uuid.UUID, n int64) (bool, error)
}

// BalanceMark is what one look at a balance changed.
type BalanceMark struct {
	WasLow, Low         bool
	LowWater, HighWater *big.Int
	Treasury            *common.Address
	Refills             int64
	RefillInFlight      bool
}

// FundingWatch watches the balances of one chain's signers that have funding marks: it
// records an event when one falls under its low-water mark and when it is back at its
// high-water mark (each crossing once, whichever node looks), and, for a signer with a
// treasury, asks the treasury for a refill up to the high-water mark: an ordinary create
// from the treasury through the service (its policies apply), at most one in flight per
// signer, sent by the treasury's lease owner.
type FundingWatch struct {
	chainID uint64
	tx      txmanager.Manager
	store   FundingStore
	events  EventStore
	chain   FundsChain
	create  *CreateTxUseCase
	funds   *FundsGuard
	log     *log.Helper
	// unrecorded are refills created whose record and event did not commit, by signer: the
	// next look records them, low or not (unrecordedRefill).
	unrecorded sync.Map
}

// unrecordedRefill is a refill the treasury was asked for whose record and event did not
// commit (a lock timeout, the database away). Its transaction exists: the next look records
// it and tells subscribers, whatever the balance is by then; a refill that landed before
// that look would otherwise stay uncounted and untold, and the next refill would reuse its
// request id.
type unrecordedRefill struct {
	txID            uuid.UUID
	refills         int64 // the signer's refills on record when it was asked for
	treasury        common.Address
	amount, balance *big.Int
}

// NewFundingWatch wires the watch of one chain.
func NewFundingWatch(chainID ChainID, tx txmanager.Manager, store FundingStore, events EventStore, chain FundsChain, create *CreateTxUseCase, funds *FundsGuard,
	logger log.Logger) *FundingWatch {
	return &FundingWatch{chainID: uint64(chainID.Int64()), tx: tx, store: store, events: events, chain: chain, create: create, funds: funds,
		log: log.NewHelper(log.With(logger, "component", "funding"))}
}

// refillCredential is the credential refills are created with: a credential policy on it
// bounds what refills may send.
const refillCredential = "service:refill"

// Pass looks at every watched signer's balance once.
func (w *FundingWatch) Pass(ctx context.Context) error {
	watched, err := w.store.List(ctx, w.chainID)
	if err != nil {
		return err
	}
	// A refill kept for a signer no longer watched has no look to record it.
	w.unrecorded.Range(func(signer, _ any) bool {
		if !slices.ContainsFunc(watched, func(f domain.Funding) bool { return f.Signer == signer.(common.Address) }) {
			w.unrecorded.Delete(signer)
		}
		return true
	})
	var errs []error
	for _, f := range watched {
		if err := w.look(ctx, f.Signer); err != nil && ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("signer %s: %w", f.Signer.Hex(), err))
		}
	}
	return errors.Join(errs...)
}

func (w *FundingWatch) look(ctx context.Context, signer common.Address) error {
	balance, err := w.chain.BalanceAt(ctx, signer)
	if err != nil {
		return err
	}
	if w.funds != nil {
		// Before the mark says the signer recovered: a caller who reads that and creates at
		// once must meet a funds check that knows the new balance, not one that refuses on
		// its recent view from before the refill.
		if err := w.funds.Saw(ctx, signer, balance); err != nil {
			w.log.Warnw("msg", "refreshing the funds check after a balance rose", "signer", signer.Hex(), "error", err.Error())
		}
	}
	var mark BalanceMark
	err = w.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("funding.mark"), func(ctx context.Context, sess txmanager.Session) error {
		if mark, err = w.store.Mark(ctx, sess, w.chainID, signer, balance); err != nil {
			return err
		}
		kind := ""
		switch {
		case mark.Low && !mark.WasLow:
			kind = domain.EventBalanceLow
		case !mark.Low && mark.WasLow:
			kind = domain.EventBalanceRecovered
		}
		if kind == "" {
			return nil
		}
		return w.events.Append(ctx, sess, ServiceEvent{ID: kind + ":" + uuid.Must(uuid.NewV7()).String(), Kind: kind, ChainID: w.chainID, Signer: signer,
			Payload: eventPayload(map[string]any{"signer": signer.Hex(), "chainId": fmt.Sprint(w.chainID), "balance": balance.String(),
				"lowWater": mark.LowWater.String(), "highWater": mark.HighWater.String()})})
	})
	if err != nil {
		return err
	}
	if mark.Low != mark.WasLow {
		w.log.Infow("msg", "signer balance crossed a funding mark", "signer", signer.Hex(), "balance", balance.String(), "low", mark.Low)
	}
	if pending, ok := w.unrecorded.Load(signer); ok {
		return w.recordRefill(ctx, signer, pending.(unrecordedRefill))
	}
	if !mark.Low || mark.Treasury == nil || mark.RefillInFlight {
		return nil
	}
	return w.refill(ctx, signer, balance, mark)
}

// refill asks the treasury for what takes signer up to its high-water mark. Every node may
// ask; the request id names the signer's next refill, so it is created once, by the
// treasury's lease owner (elsewhere the create path answers NOT_LEADER).
func (w *FundingWatch) refill(ctx context.Context, signer common.Address, balance *big.Int, mark BalanceMark) error {
	amount := new(big.Int).Sub(mark.HighWater, balance)
	if amount.Sign() <= 0 {
		return nil
	}
	n := mark.Refills + 1
	ctx = domain.WithPrincipal(ctx, domain.Principal{ID: refillCredential, AllSigners: true})
	res, err := w.create.Create(ctx, domain.CreateInput{Signer: mark.Treasury.Hex(), RequestID: domain.RefillRequestID(signer, n), To: signer.Hex(),
		Value: amount.String(), GasLimit: TransferGas(ctx, w.create.chain, *mark.Treasury, signer)})
	if errors.Is(err, domain.ErrNotLeader) {
		return nil
	}
	if errors.Is(err, domain.ErrIdempotencyConflict) && res.Tx.ID != uuid.Nil {
		// The n-th refill was made before, for another amount: its answer was lost (the
		// count did not move on), or the marks were set anew and counted from 0 again. It is
		// recorded as the refill it is, and the next one gets the next request id.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("refill from %s: %w", mark.Treasury.Hex(), err)
	}
	if v := res.Tx.Intent.Value; v != nil {
		amount = v // what the refill on record sends
	}
	return w.recordRefill(ctx, signer, unrecordedRefill{txID: res.Tx.ID, refills: mark.Refills, treasury: *mark.Treasury, amount: amount, balance: balance})
}

// recordRefill records a refill created for signer and tells subscribers, together:
// recorded alone, a failed append would lose its event for good, since later looks find the
// refill in flight. Until both commit the refill is kept to be recorded by the next look.
func (w *FundingWatch) recordRefill(ctx context.Context, signer common.Address, r unrecordedRefill) error {
	recorded := false
	err := w.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("funding.refill"), func(ctx context.Context, sess txmanager.Session) error {
		took, err := w.store.RecordRefill(ctx, sess, w.chainID, signer, r.txID, r.refills)
		if recorded = took; err != nil || !took {
			return err // not taken: another node recorded this refill, with its event
		}
		return w.events.Append(ctx, sess, ServiceEvent{ID: domain.EventRefillSent + ":" + r.txID.String(), Kind: domain.EventRefillSent, ChainID: w.chainID, Signer: signer,
			Payload: eventPayload(map[string]any{"signer": signer.Hex(), "treasury": r.treasury.Hex(), "value": r.amount.String(), "txId": r.txID.String(),
				"balance": r.balance.String()})})
	})
	if err != nil {
		w.unrecorded.Store(signer, r)
		return fmt.Errorf("record the refill %s: %w", r.txID, err)
	}
	w.unrecorded.Delete(signer)
	if recorded {
		w.log.Infow("msg", "refill sent", "signer", signer.Hex(), "treasury", r.treasury.Hex(), "value", r.amount.String(), "tx_id", r.txID.String(),
			"refill", r.refills+1)
	}
	return nil
}

// FundingBook is the operators' side of funding marks.
type FundingBook struct {
	store FundingStore
	audit *AuditTrail
}

// NewFundingBook wires the book.
func NewFundingBook(store FundingStore, audit *AuditTrail) *FundingBook {
	return &FundingBook{store: store, audit: audit}
}

// Set records a signer's marks (and treasury) on a chain.
func (b *FundingBook) Set(ctx context.Context, chainID uint64, signer, lowWater, highWater, treasury, by string) (domain.Funding, error) {
	f, err := domain.ParseFunding(signer, lowWater, highWater, treasury)
	if err != nil {
		return domain.Funding{}, err
	}
	f.ChainID = chainID
	if err := b.store.Put(ctx, f, by); err != nil {
		return domain.Funding{}, err
	}
	after := map[string]any{"lowWater": f.LowWater.String(), "highWater": f.HighWater.String(), "chainId": chainID}
	if f.Treasury != nil {
		after["treasury"] = f.Treasury.Hex()
	}
	b.audit.RecordAfter(ctx, by, domain.AuditFundingSet, "funding "+f.Signer.Hex(), nil, after)
	return b.store.Get(ctx, chainID, f.Signer)
}

// Get reads a signer's marks.
func (b *FundingBook) Get(ctx context.Context, chainID uint64, signer string) (domain.Funding, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return domain.Funding{}, err
	}
	return b.store.Get(ctx, chainID, addr)
}

// Delete stops watching a signer's balance.
func (b *FundingBook) Delete(ctx context.Context, chainID uint64, signer, by string) error {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return err
	}
	found, err := b.store.Delete(ctx, chainID, addr)
	if err != nil {
		return err
	}
	if !found {
		return &domain.NotFoundError{What: "no funding marks for signer " + addr.Hex()}
	}
	b.audit.RecordAfter(ctx, by, domain.AuditFundingDeleted, "funding "+addr.Hex(), nil, map[string]any{"chainId": chainID})
	return nil
}
