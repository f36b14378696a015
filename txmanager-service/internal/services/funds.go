package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/singleflight"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// FundsStore reads what a signer's unfinished transactions may still cost.
type FundsStore interface {
	// UnminedCost is the most the signer's transactions at fromNonce and above may still
	// cost: value + gas limit x the highest max fee signed for each (the intent's own cap,
	// or fallbackFee, for one not signed yet). fromNonce is the signer's nonce at the block
	// its balance was read at: the transactions below it are paid for in that balance,
	// whether or not their receipts are recorded yet, and those at and above it are not,
	// whatever receipt another endpoint gave for them.
	UnminedCost(ctx context.Context, signer string, fromNonce uint64, fallbackFee *big.Int) (*big.Int, error)
}

// FundsConfig tunes the admission funds check.
type FundsConfig struct {
	// Check: refuse (422 INSUFFICIENT_FUNDS) an intent the signer cannot pay for out of
	// its balance minus what its unfinished transactions may cost.
	Check bool
	// CacheFor is how long a signer's balance and committed cost are reused: the check must
	// not cost a chain call and a database query per create on a hot signer. Creates
	// accepted in between are added to the cached cost as they pass.
	CacheFor time.Duration
	// Fees prices intents without their own fee cap, as their first attempt would be.
	Fees FeePolicy
	// OPStack: the chain charges an L1 data fee besides gas; the check counts each
	// transaction's upper bound of it (DataFeeChain, DataSizeStore).
	OPStack bool
}

// DataFeeChain reads an OP-stack chain's current L1 prices.
type DataFeeChain interface {
	OPStackFeeParams(ctx context.Context) (domain.OPStackFeeParams, error)
}

// DataSizeStore counts a signer's transactions at fromNonce and above (FundsStore) by
// call-data size.
type DataSizeStore interface {
	UnminedDataSizes(ctx context.Context, signer string, fromNonce uint64) (map[int]int64, error)
}

// unsignedTxFixedBytes bounds what an unsigned EIP-1559 transaction holds besides its call
// data: the type byte, the list header, the chain id, nonce, tip and fee cap at 9 bytes
// each, the gas limit at 5, the recipient (21), the value at its widest (33), the data's
// length prefix (up to 4) and an empty access list.
const unsignedTxFixedBytes = 1 + 3 + 9 + 9 + 9 + 9 + 5 + 21 + 33 + 4 + 1

// dataFeeBound is the most the L1 data fee of a transaction with dataBytes of call data can
// be at prices p.
func dataFeeBound(p domain.OPStackFeeParams, dataBytes int) *big.Int {
	return p.L1FeeUpperBound(unsignedTxFixedBytes + dataBytes)
}

// FundsChain is what the funds check reads of the chain: balances, and the fees a
// transaction without its own would be signed at.
type FundsChain interface {
	BalanceSource
	FeeSource
}

// FundsGuard is the admission check that a signer can pay for an intent, and the source of
// the signer balance gauges. Its cache is a guard, not a ledger: a transaction admitted here
// that later finds the balance spent (by something outside the service) waits in
// INSUFFICIENT_FUNDS and is resubmitted once the signer is funded.
type FundsGuard struct {
	cfg   FundsConfig
	chain FundsChain
	store FundsStore
	// dataFees and sizes are the chain and store as OP-stack sources (cfg.OPStack only).
	dataFees DataFeeChain
	sizes    DataSizeStore
	clock    Clock
	refresh  singleflight.Group

	mu      sync.Mutex
	signers map[string]*signerFunds
	// admitted follows each signer's reservations after their snapshot: a reload counts
	// those whose rows its query may not see.
	admitted map[string]*admittedCost
	// lastBackground is when each signer's last background reload started.
	lastBackground map[string]time.Time
	// prices are the L1 prices last read for bounds without a funds check, at pricesAt.
	prices   *domain.OPStackFeeParams
	pricesAt time.Time
}

// signerFunds is one signer's cached position; reserved is what creates admitted since the
// snapshot may cost, added before their rows exist.
type signerFunds struct {
	balance, committed, reserved *big.Int
	fee                          *big.Int // fee cap for an intent without its own
	// dataFees are the L1 prices the snapshot bounded data fees with (OP-stack chains).
	dataFees *domain.OPStackFeeParams
	at       time.Time
	// window is how long the snapshot is reused when that is longer than CacheFor:
	// reloadCostFactor times what its reload took.
	window time.Duration
}

// admittedCost is what a signer's reservations add up to by where their creates are:
// outstanding, still on their way to the writer (their rows not written yet), and settled,
// written (a running total). A reload's query sees none of the outstanding ones and
// perhaps not those settled while it ran; it counts both in its snapshot's reserved cost.
type admittedCost struct {
	outstanding, settled *big.Int
}

func (g *FundsGuard) admittedOf(signerHex string) *admittedCost {
	a := g.admitted[signerHex]
	if a == nil {
		a = &admittedCost{outstanding: new(big.Int), settled: new(big.Int)}
		g.admitted[signerHex] = a
	}
	return a
}

func (f *signerFunds) spendable() *big.Int {
	s := new(big.Int).Sub(f.balance, f.committed)
	return s.Sub(s, f.reserved)
}

// NewFundsGuard builds the guard and registers the signer_balance_wei and
// signer_spendable_wei gauges.
func NewFundsGuard(cfg FundsConfig, chain FundsChain, store FundsStore, clock Clock, metrics *telemetry.Metrics) (*FundsGuard, error) {
	g := &FundsGuard{cfg: cfg, chain: chain, store: store, clock: clock, signers: map[string]*signerFunds{}, admitted: map[string]*admittedCost{}, lastBackground: map[string]time.Time{}}
	if cfg.OPStack {
		var ok bool
		if g.dataFees, ok = chain.(DataFeeChain); !ok {
			return nil, fmt.Errorf("chain.feeModel op-stack: the L1 data fee is read from a JSON-RPC node, and this chain (%T) has none", chain)
		}
	}
	if cfg.OPStack && cfg.Check {
		var ok bool
		if g.sizes, ok = store.(DataSizeStore); !ok {
			return nil, fmt.Errorf("chain.feeModel op-stack: the funds store (%T) cannot count transactions by data size", store)
		}
	}
	if err := metrics.RegisterFloatGauge("signer_balance_wei", "Latest balance of each signer this node checked, in wei.", g.observe(func(f *signerFunds) *big.Int { return f.balance })); err != nil {
		return nil, err
	}
	if err := metrics.RegisterFloatGauge("signer_spendable_wei",
		"Balance minus the most the signer's transactions that balance has not paid for yet may cost, in wei; below zero some of them cannot be paid.",
		g.observe((*signerFunds).spendable)); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *FundsGuard) observe(value func(*signerFunds) *big.Int) func(context.Context, func(float64, ...attribute.KeyValue)) {
	return func(_ context.Context, record func(float64, ...attribute.KeyValue)) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for signer, f := range g.signers {
			v, _ := new(big.Float).SetInt(value(f)).Float64()
			record(v, attribute.String("signer", signer))
		}
	}
}

// Reservation is an admitted intent's share of the signer's spendable balance: Settle it
// once its row is written, Release it if the create does not go through.
type Reservation struct {
	guard  *FundsGuard
	signer string
	cost   *big.Int
	// done: settled or released (guard.mu).
	done bool
	// remaining is what the signer could spend once this reservation was counted.
	remaining *big.Int
	// dataFee is the L1 data fee's bound counted in cost (nil on a chain without one).
	dataFee *big.Int
}

// DataFee is the bound of the intent's L1 data fee the reservation counts (nil on a chain
// without one, or without a funds check).
func (r *Reservation) DataFee() *big.Int {
	if r == nil {
		return nil
	}
	return r.dataFee
}

// Remaining is what the signer could spend after its unfinished transactions and this
// reservation, when it was made (nil without a funds check).
func (r *Reservation) Remaining() *big.Int {
	if r == nil {
		return nil
	}
	return r.remaining
}

// Release returns the reserved amount when the create wrote no row.
func (r *Reservation) Release() {
	r.finish(false)
}

// Settle records that the create's row was written, or may have been (an outcome unknown):
// a reload whose query starts after this counts it from the row, if there is one.
func (r *Reservation) Settle() {
	r.finish(true)
}

// settleBy settles or releases the reservation by the writer's outcome for its create, when
// the writer has one: a caller that stopped waiting is answered ErrOutcomeUnknown while the
// create is still queued, and its row may be written after (settled then, a reload starting
// before would count it nowhere).
func (r *Reservation) settleBy(tx domain.ManagedTx, created bool, err error) {
	switch {
	case errors.Is(err, domain.ErrOutcomeUnknown):
		// The writer's commit whose outcome it could not learn: made or not, a reload that
		// starts after this reads it from its row if there is one.
		r.Settle()
	case err != nil:
		r.Release()
	case !created || tx.State == domain.StateAwaitingApproval:
		// A replay of a concurrent create: its cost is already counted. An intent sent for
		// approval has no nonce yet: its cost counts once it is admitted.
		r.Release()
	default:
		r.Settle()
	}
}

func (r *Reservation) finish(settled bool) {
	if r == nil || r.guard == nil {
		return
	}
	g := r.guard
	g.mu.Lock()
	defer g.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	a := g.admittedOf(r.signer)
	a.outstanding.Sub(a.outstanding, r.cost)
	if settled {
		a.settled.Add(a.settled, r.cost)
		return
	}
	// Every outstanding reservation is in the signer's current snapshot: made on it, or
	// carried over by the reload that made it.
	if f := g.signers[r.signer]; f != nil {
		if f.reserved.Sub(f.reserved, r.cost); f.reserved.Sign() < 0 {
			f.reserved.SetInt64(0)
		}
	}
}

// Reserve admits an intent the signer can pay for and reserves its maximum cost, or
// returns an error matching domain.ErrInsufficientFunds (or ErrUnavailable when the
// balance cannot be read). With the check off it admits everything; on an OP-stack chain
// its reservation still carries the intent's L1 data fee bound, which spending policies'
// fee windows count.
func (g *FundsGuard) Reserve(ctx context.Context, signer common.Address, signerHex string, intent domain.Intent, gasLimit uint64) (*Reservation, error) {
	if !g.cfg.Check {
		if g.dataFees == nil {
			return nil, nil
		}
		prices, ok := g.l1Prices(ctx)
		if !ok {
			// Never read yet: a create does not wait for the chain with the check off, and a
			// fee window counts its gas alone.
			return nil, nil
		}
		return &Reservation{signer: signerHex, dataFee: dataFeeBound(prices, len(intent.Data))}, nil
	}
	var lookedAgainAt time.Time
	for attempt := 0; ; attempt++ {
		f, err := g.snapshot(ctx, signer, signerHex, attempt > 0)
		if err != nil {
			return nil, &domain.UnavailableError{Reason: "signer balance", RetryAfter: time.Second, Err: err}
		}
		if attempt > 0 && attempt < 3 && f.at.Before(lookedAgainAt) {
			// The reload joined was started before this create looked again: the signer
			// may have been funded in between.
			continue
		}
		l2Cost := intentCost(intent, gasLimit, f.fee)
		cost := l2Cost
		var dataFee *big.Int
		if f.dataFees != nil {
			dataFee = dataFeeBound(*f.dataFees, len(intent.Data))
			cost = new(big.Int).Add(l2Cost, dataFee)
		}
		g.mu.Lock()
		current := g.signers[signerHex]
		if current == nil {
			current = f
		}
		spendable := current.spendable()
		if spendable.Cmp(cost) >= 0 {
			current.reserved.Add(current.reserved, cost)
			a := g.admittedOf(signerHex)
			a.outstanding.Add(a.outstanding, cost)
			g.mu.Unlock()
			return &Reservation{guard: g, signer: signerHex, cost: cost, remaining: new(big.Int).Sub(spendable, cost), dataFee: dataFee}, nil
		}
		fresh := g.clock.Now().Sub(current.at) < g.cfg.CacheFor/4
		g.mu.Unlock()
		lookedAgainAt = g.clock.Now()
		// Refuse only on a recent view: the signer may just have been funded.
		if attempt > 0 || fresh {
			if dataFee != nil {
				return nil, fmt.Errorf("%w: signer %s can spend %s wei after the transactions its balance has not paid for yet (their L1 data fees included), this intent may cost up to %s wei: L2 execution %s wei (value + gasLimit %d x maxFeePerGas %s) and L1 data fee up to %s wei",
					domain.ErrInsufficientFunds, signerHex, spendable.String(), cost.String(), l2Cost.String(), gasLimit, feeFor(intent, f.fee), dataFee.String())
			}
			return nil, fmt.Errorf("%w: signer %s can spend %s wei after the transactions its balance has not paid for yet, this intent may cost up to %s wei (value + gasLimit %d x maxFeePerGas %s)",
				domain.ErrInsufficientFunds, signerHex, spendable.String(), cost.String(), gasLimit, feeFor(intent, f.fee))
		}
	}
}

// Saw tells the guard a balance read elsewhere (the funding watch's): when the guard's view
// of the signer holds less, the signer was funded since, and its view is read again.
func (g *FundsGuard) Saw(ctx context.Context, signer common.Address, balance *big.Int) error {
	g.mu.Lock()
	f := g.signers[signer.Hex()]
	stale := f != nil && f.balance.Cmp(balance) < 0
	g.mu.Unlock()
	if !stale {
		return nil
	}
	_, err := g.snapshot(ctx, signer, signer.Hex(), true)
	return err
}

// Refresh reloads every signer's balance the guard has seen, for the gauges.
func (g *FundsGuard) Refresh(ctx context.Context, signers []common.Address) error {
	var firstErr error
	for _, signer := range signers {
		if _, err := g.snapshot(ctx, signer, signer.Hex(), true); err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

// snapshot returns the signer's cached position. One younger than its reuse window
// (CacheFor, or longer on a signer whose reload is slow: see reloadCostFactor) is used as it
// is. One older, but younger than twice the window, is still used while a reload runs in
// the background: the reload reads every unfinished transaction of the signer, which on a
// hot signer with a backlog takes tens to hundreds of milliseconds, and admission must not
// stop for it (every create of the signer waited on it, the slowest creates' latency). The
// creates admitted meanwhile keep adding to the snapshot's reserved cost, so only what
// changed outside the service (a payment by the same key elsewhere, a top-up) is seen up to
// one window later, as between reloads anyway; a refusal is always made on a reloaded view
// (Reserve). Older than that, or with force, the caller waits for the reload. Concurrent
// reloads of one signer share one chain call and one query.
func (g *FundsGuard) snapshot(ctx context.Context, signer common.Address, signerHex string, force bool) (*signerFunds, error) {
	g.mu.Lock()
	f := g.signers[signerHex]
	g.mu.Unlock()
	if f != nil && !force {
		age, window := g.clock.Now().Sub(f.at), max(g.cfg.CacheFor, f.window)
		if age < window {
			return f, nil
		}
		if age < 2*window {
			g.reloadInBackground(ctx, signer, signerHex)
			return f, nil
		}
	}
	v, err, _ := g.refresh.Do(signerHex, func() (any, error) { return g.reload(ctx, signer, signerHex) })
	if err != nil {
		return nil, err
	}
	return v.(*signerFunds), nil //nolint:forcetypeassert // reload returns nothing else
}

// reloadCostFactor spaces a signer's reloads at least this many times as far apart as the
// last one took: the committed-cost query reads every unfinished transaction of the signer,
// so on a backlog of 100,000 (a hot signer whose chain is slow or down) it costs the
// database most of a second of CPU, which every two seconds took a third of a core or more
// from the creates themselves (and a reload slower than CacheFor made them wait again).
const reloadCostFactor = 10

// backgroundReloadTimeout bounds a reload no caller waits for.
const backgroundReloadTimeout = 10 * time.Second

// reloadInBackground starts a reload of the signer's position unless one is running or one
// started less than a quarter of CacheFor ago (a failing chain is not asked once per create).
func (g *FundsGuard) reloadInBackground(ctx context.Context, signer common.Address, signerHex string) {
	now := g.clock.Now()
	g.mu.Lock()
	if last, ok := g.lastBackground[signerHex]; ok && now.Sub(last) < g.cfg.CacheFor/4 {
		g.mu.Unlock()
		return
	}
	g.lastBackground[signerHex] = now
	g.mu.Unlock()
	// Not the request's context: the reload outlives the create that started it.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), backgroundReloadTimeout)
	done := g.refresh.DoChan(signerHex, func() (any, error) { return g.reload(ctx, signer, signerHex) })
	go func() {
		defer cancel()
		<-done // an error leaves the older snapshot in place until it is too old to use
	}()
}

// reload reads the signer's balance and committed cost and replaces its snapshot.
func (g *FundsGuard) reload(ctx context.Context, signer common.Address, signerHex string) (*signerFunds, error) {
	at := g.clock.Now()
	g.mu.Lock()
	settledBefore := new(big.Int).Set(g.admittedOf(signerHex).settled)
	g.mu.Unlock()
	fees, err := g.chain.SuggestFees(ctx)
	if err != nil {
		return nil, err
	}
	fee, _, err := g.cfg.Fees.Initial(domain.Intent{}, fees)
	if err != nil {
		return nil, err
	}
	// The balance and the nonce come from one block of one endpoint, and the cost counted is
	// that of the transactions at and above the nonce: each transaction is counted once,
	// either in the balance or in the cost, however far that endpoint trails the one whose
	// receipts the database holds, and whichever of the two reads a block falls between.
	account, err := g.chain.AccountAt(ctx, signer)
	if err != nil {
		return nil, err
	}
	committed, err := g.store.UnminedCost(ctx, signerHex, account.Nonce, fee)
	if err != nil {
		return nil, err
	}
	var dataFees *domain.OPStackFeeParams
	if g.sizes != nil {
		if dataFees, err = g.unminedDataFees(ctx, signerHex, account.Nonce, committed); err != nil {
			return nil, err
		}
	}
	fresh := &signerFunds{balance: account.Balance, committed: committed, reserved: new(big.Int), fee: fee, dataFees: dataFees, at: at,
		window: reloadCostFactor * g.clock.Now().Sub(at)}
	g.mu.Lock()
	defer g.mu.Unlock()
	// The query saw no row of a create still on its way to the writer, however long ago it
	// was admitted (a batch of a thousand from one signer waits for several writer batches),
	// and perhaps not one written while it ran: both stay reserved. Those it did see are
	// counted twice until the next reload, which errs on the side of refusing.
	a := g.admittedOf(signerHex)
	fresh.reserved.Sub(a.settled, settledBefore)
	fresh.reserved.Add(fresh.reserved, a.outstanding)
	g.signers[signerHex] = fresh
	return fresh, nil
}

// l1PricesKey is the L1 prices' key among the reloads (the others are signers' addresses).
const l1PricesKey = "l1-prices"

// l1PricesFor is the least time the L1 prices are reused, with CacheFor shorter.
const l1PricesFor = time.Second

// l1Prices are the chain's L1 prices read at most once every CacheFor (and l1PricesFor),
// for bounds without a funds check. A failed read falls back to the last prices read; ok is
// false when none ever was.
func (g *FundsGuard) l1Prices(ctx context.Context) (domain.OPStackFeeParams, bool) {
	g.mu.Lock()
	prices, at := g.prices, g.pricesAt
	g.mu.Unlock()
	if prices != nil && g.clock.Now().Sub(at) < max(g.cfg.CacheFor, l1PricesFor) {
		return *prices, true
	}
	v, err, _ := g.refresh.Do(l1PricesKey, func() (any, error) {
		read, err := g.dataFees.OPStackFeeParams(ctx)
		if err != nil {
			return nil, err
		}
		g.mu.Lock()
		g.prices, g.pricesAt = &read, g.clock.Now()
		g.mu.Unlock()
		return read, nil
	})
	if err != nil {
		if prices != nil {
			return *prices, true
		}
		return domain.OPStackFeeParams{}, false
	}
	return v.(domain.OPStackFeeParams), true //nolint:forcetypeassert // the read returns nothing else
}

// unminedDataFees reads the chain's L1 prices and adds to committed the most the L1 data
// fees of the signer's transactions at fromNonce and above may be at them.
func (g *FundsGuard) unminedDataFees(ctx context.Context, signerHex string, fromNonce uint64, committed *big.Int) (*domain.OPStackFeeParams, error) {
	prices, err := g.dataFees.OPStackFeeParams(ctx)
	if err != nil {
		return nil, fmt.Errorf("L1 prices: %w", err)
	}
	sizes, err := g.sizes.UnminedDataSizes(ctx, signerHex, fromNonce)
	if err != nil {
		return nil, err
	}
	for size, count := range sizes {
		committed.Add(committed, new(big.Int).Mul(dataFeeBound(prices, size), big.NewInt(count)))
	}
	return &prices, nil
}

// intentCost is the most an intent can cost: its value plus its gas limit at its own fee
// cap, or at the cap its first attempt would get.
func intentCost(intent domain.Intent, gasLimit uint64, fallbackFee *big.Int) *big.Int {
	cost := new(big.Int).Mul(new(big.Int).SetUint64(gasLimit), feeFor(intent, fallbackFee))
	if intent.Value != nil {
		cost.Add(cost, intent.Value)
	}
	return cost
}

func feeFor(intent domain.Intent, fallbackFee *big.Int) *big.Int {
	if intent.MaxFeePerGas != nil {
		return intent.MaxFeePerGas
	}
	return fallbackFee
}

// LastBalance is the signer's balance as the guard last read it, and when: what an
// operator's page shows without asking the chain (a page must not wait on a failing node).
// ok is false when the guard has not read it yet.
func (g *FundsGuard) LastBalance(signer common.Address) (balance *big.Int, at time.Time, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f := g.signers[signer.Hex()]
	if f == nil {
		return nil, time.Time{}, false
	}
	return new(big.Int).Set(f.balance), f.at, true
}
