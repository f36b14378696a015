package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

var _ services.Chain = (*MultiChain)(nil)

// Endpoint is one JSON-RPC node of the chain.
type Endpoint struct {
	// Name identifies it in logs and metrics (EndpointName: no credentials).
	Name  string
	Chain *RPCChain
}

// MultiChainConfig bounds and paces the calls.
type MultiChainConfig struct {
	// ReadTimeout, SendTimeout and ReceiptsTimeout bound one call to one endpoint.
	ReadTimeout, SendTimeout, ReceiptsTimeout time.Duration
	// ProbeInterval: how often every endpoint's head is read (0: no prober, for tests
	// that drive health by hand).
	ProbeInterval time.Duration
	// MaxLagBlocks: an endpoint trailing the best head by more is used only as a last resort.
	MaxLagBlocks uint64
	// BroadcastToAll sends transactions to every usable endpoint instead of the first.
	BroadcastToAll bool
	// FeeMaxAge is how long one fee suggestion serves every signer of the chain (0: each
	// caller asks the node). Fees change once per block, so at most a block time is right.
	FeeMaxAge time.Duration
}

// MultiChain is the chain behind one or more endpoints, treated as hostile: every call has a
// deadline; a call that gets no answer from one endpoint moves to the next usable one; an
// endpoint that failed is skipped until the prober hears from it again, and one that lags
// is used only when nothing better is. Answers about the request itself (a revert, "nonce
// too low") are returned as they are: another node would say the same.
type MultiChain struct {
	cfg       MultiChainConfig
	endpoints []Endpoint
	log       *log.Helper

	fees *sharedFees

	mu     sync.Mutex
	health []EndpointHealth
	// identity, once verified, is what a late endpoint must also serve; identityChecked
	// records which endpoints were compared with it.
	identity        *Identity
	identityChecked []bool

	stop     chan struct{}
	wg       sync.WaitGroup
	stopOnce sync.Once

	// held refuses every call until the chain's identity is proven (HoldUntilVerified).
	held        atomic.Bool
	heldChainID atomic.Uint64
}

// Identity is what makes a chain this chain: its id and its genesis block.
type Identity struct {
	ChainID     *big.Int
	GenesisHash common.Hash
}

// NewMultiChain watches endpoints (in order of preference) and starts the prober. Close
// stops the prober and closes the endpoints' clients.
func NewMultiChain(endpoints []Endpoint, cfg MultiChainConfig, logger log.Logger) (*MultiChain, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("chain: no endpoints")
	}
	m := &MultiChain{
		cfg: cfg, endpoints: endpoints, fees: newSharedFees(cfg.FeeMaxAge),
		log: log.NewHelper(log.With(logger, "component", "chain-endpoints")), stop: make(chan struct{}),
	}
	m.health = make([]EndpointHealth, len(endpoints))
	m.identityChecked = make([]bool, len(endpoints))
	for i, e := range endpoints {
		m.health[i] = EndpointHealth{Name: e.Name, Reachable: true}
	}
	if cfg.ProbeInterval > 0 {
		m.wg.Go(m.probeLoop)
	}
	return m, nil
}

// Close stops probing and closes every endpoint's client.
func (m *MultiChain) Close() {
	m.stopOnce.Do(func() {
		close(m.stop)
		m.wg.Wait()
		for _, e := range m.endpoints {
			e.Chain.Close()
		}
	})
}

// Health is a snapshot of every endpoint's state, in configured order.
func (m *MultiChain) Health() []EndpointHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]EndpointHealth(nil), m.health...)
}

// VerifyIdentity reads the chain id and genesis hash from every endpoint that answers and
// fails when two disagree: an endpoint of another network must never be trusted with our
// transactions. It returns the identity the endpoints serve; endpoints that do not answer
// now are checked by the prober when they do.
func (m *MultiChain) VerifyIdentity(ctx context.Context) (Identity, error) {
	var (
		found     *Identity
		foundFrom string
		errs      []error
		checked   = make([]bool, len(m.endpoints))
	)
	for i, e := range m.endpoints {
		callCtx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
		sent := time.Now()
		id, err := identityOf(callCtx, e.Chain)
		cancel()
		if err != nil {
			err = withoutURL(err, e.Name)
			m.markFailed(i, err, sent)
			errs = append(errs, fmt.Errorf("%s: %w", e.Name, err))
			continue
		}
		checked[i] = true
		if found == nil {
			found, foundFrom = &id, e.Name
			continue
		}
		if id.ChainID.Cmp(found.ChainID) != 0 || id.GenesisHash != found.GenesisHash {
			return Identity{}, fmt.Errorf("chain endpoints disagree: %s serves chain id %s (genesis %s), %s serves chain id %s (genesis %s)",
				foundFrom, found.ChainID, found.GenesisHash.Hex(), e.Name, id.ChainID, id.GenesisHash.Hex())
		}
	}
	if found == nil {
		return Identity{}, fmt.Errorf("%w: %w", services.ErrNoChainEndpoint, errors.Join(errs...))
	}
	if len(errs) > 0 {
		m.log.Warnw("msg", "chain endpoints unreachable at start; they join once they answer and serve the same chain", "errors", errors.Join(errs...).Error())
	}
	m.mu.Lock()
	m.identity, m.identityChecked = found, checked
	m.mu.Unlock()
	return *found, nil
}

func identityOf(ctx context.Context, c *RPCChain) (Identity, error) {
	id, err := c.ChainID(ctx)
	if err != nil {
		return Identity{}, err
	}
	genesis, err := c.HeadersByNumber(ctx, []uint64{0})
	if err != nil {
		return Identity{}, err
	}
	if genesis[0] == nil {
		return Identity{}, errors.New("node returned no genesis block")
	}
	return Identity{ChainID: id, GenesisHash: genesis[0].Hash}, nil
}

// order is the current call order (callOrder over the latest health).
func (m *MultiChain) order() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return callOrder(m.health, m.cfg.MaxLagBlocks)
}

// markAnswered records the answer to a call sent at sent.
func (m *MultiChain) markAnswered(i int, head uint64, sent time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.health[i]
	if time.Now().Before(h.LimitedUntil) || h.WrongChain {
		// A call sent before it throttled us came back: it stays aside for its pause (a
		// provider throttles some requests, not all). One on another chain stays aside.
		h.Head = max(h.Head, head)
		return
	}
	if !h.Reachable && !sent.After(h.failedSent) {
		// Sent before the call that failed: its answer was on its way, or read late on a
		// loaded machine, and says nothing about the endpoint since. (One sent after it,
		// while a slow call timed out, does: the endpoint answers.)
		h.Head = max(h.Head, head)
		return
	}
	if !h.Reachable {
		m.log.Infow("msg", "chain endpoint answers again", "endpoint", h.Name)
	}
	h.Reachable, h.LastError = true, ""
	h.Head = max(h.Head, head)
}

// markFailed records the failure of a call sent at sent.
func (m *MultiChain) markFailed(i int, err error, sent time.Time) {
	now := time.Now()
	limited := isRateLimited(err)
	var pause time.Duration
	if limited {
		pause = m.endpoints[i].Chain.RateLimitPause(now)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.health[i]
	switch {
	case limited && now.After(h.LimitedUntil):
		m.log.Warnw("msg", "chain endpoint throttles our requests; using the others until it takes them again", "endpoint", h.Name,
			"pause", pause.String(), "error", err.Error())
	case !limited && h.Reachable:
		m.log.Warnw("msg", "chain endpoint failed; skipping it until it answers", "endpoint", h.Name, "error", err.Error())
	}
	h.failedSent = maxTime(h.failedSent, sent)
	if limited {
		h.LimitedUntil = now.Add(pause)
	} else if m.identityChecked != nil {
		// Checked again when it answers: it may come back as another chain (a node
		// restarted on another network, a chain reset with the same id).
		m.identityChecked[i] = false
	}
	h.Reachable, h.LastError = false, err.Error()
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// call runs one request on the best endpoint, moving on to the next when an endpoint does
// not answer within timeout. It fails with services.ErrNoChainEndpoint when no endpoint
// is usable or none answered.
func (m *MultiChain) call(ctx context.Context, what string, timeout time.Duration, do func(context.Context, *RPCChain) error) error {
	if err := m.holdError(); err != nil {
		return err
	}
	order := m.order()
	if len(order) == 0 {
		return fmt.Errorf("%s: %w", what, services.ErrNoChainEndpoint)
	}
	var failures []error
	for _, i := range order {
		callCtx, cancel := context.WithTimeout(ctx, timeout)
		sent := time.Now()
		err := withoutURL(do(callCtx, m.endpoints[i].Chain), m.endpoints[i].Name)
		cancel()
		if endpointAnswered(err) {
			m.markAnswered(i, 0, sent)
			return err
		}
		if callerGaveUp(ctx) {
			return err
		}
		m.markFailed(i, err, sent)
		failures = append(failures, fmt.Errorf("%s: %w", m.endpoints[i].Name, err))
	}
	return fmt.Errorf("%s: %w: %w", what, services.ErrNoChainEndpoint, errors.Join(failures...))
}

// via runs one request as call does and returns its answer: every forwarding method of
// MultiChain is this one mechanism (deadline, failover, health, the identity hold) applied
// to the endpoint's own method.
func via[T any](m *MultiChain, ctx context.Context, what string, timeout time.Duration, do func(context.Context, *RPCChain) (T, error)) (T, error) {
	var out T
	err := m.call(ctx, what, timeout, func(ctx context.Context, c *RPCChain) (err error) {
		out, err = do(ctx, c)
		return err
	})
	return out, err
}

// HoldUntilVerified refuses every call, at once and as unavailable, until Open: endpoints
// that did not answer at start may serve another chain when they come up, so nothing is
// read from or sent to them until they are shown to serve chainID (VerifyIdentity, which
// the hold does not stop).
func (m *MultiChain) HoldUntilVerified(chainID uint64) {
	m.heldChainID.Store(chainID)
	m.held.Store(true)
}

// Open lets calls through for good: the endpoints were shown to serve the chain.
func (m *MultiChain) Open() { m.held.Store(false) }

// IsOpen reports whether calls go through.
func (m *MultiChain) IsOpen() bool { return !m.held.Load() }

// holdError says why a held chain refuses a call.
func (m *MultiChain) holdError() error {
	if !m.held.Load() {
		return nil
	}
	return fmt.Errorf("%w: chain %d has not been verified since start (its endpoints did not answer, or serve another chain)", services.ErrNoChainEndpoint, m.heldChainID.Load())
}

// Usable implements services.Chain.
func (m *MultiChain) Usable() error {
	if err := m.holdError(); err != nil {
		return err
	}
	if len(m.order()) == 0 {
		return fmt.Errorf("%w: every endpoint failed its latest call or probe", services.ErrNoChainEndpoint)
	}
	return nil
}

// PendingNonceAt implements services.Chain.
func (m *MultiChain) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	return via(m, ctx, "pending nonce", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (uint64, error) { return c.PendingNonceAt(ctx, account) })
}

// HighestPendingNonceAt asks every usable endpoint for account's pending nonce, side by side,
// and answers the highest: transactions the database lost may wait in one node's pool only
// (a private or sequencer mempool), and a lagging endpoint answers low. A question whose
// answer decides that nonces are free must take the highest anyone reports. At least one
// endpoint must answer.
func (m *MultiChain) HighestPendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	order := m.order()
	if err := m.holdError(); err != nil || len(order) < 2 {
		return m.PendingNonceAt(ctx, account)
	}
	nonces := make([]uint64, len(order))
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for k, i := range order {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
			defer cancel()
			nonces[k], errs[k] = m.endpoints[i].Chain.PendingNonceAt(callCtx, account)
			if errs[k] != nil {
				errs[k] = fmt.Errorf("%s: %w", m.endpoints[i].Name, withoutURL(errs[k], m.endpoints[i].Name))
			}
		})
	}
	wg.Wait()
	highest, answered := uint64(0), false
	for k := range order {
		if errs[k] == nil {
			highest, answered = max(highest, nonces[k]), true
		}
	}
	if !answered {
		return 0, fmt.Errorf("pending nonce: %w: %w", services.ErrNoChainEndpoint, errors.Join(errs...))
	}
	return highest, nil
}

// NonceAt is the number of the account's mined transactions.
func (m *MultiChain) NonceAt(ctx context.Context, account common.Address) (uint64, error) {
	return via(m, ctx, "latest nonce", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (uint64, error) { return c.NonceAt(ctx, account) })
}

// BalanceAt implements services.Chain.
func (m *MultiChain) BalanceAt(ctx context.Context, account common.Address) (*big.Int, error) {
	return via(m, ctx, "balance", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (*big.Int, error) { return c.BalanceAt(ctx, account) })
}

// AccountAt implements services.BalanceSource. One endpoint answers both reads. An endpoint
// that trails the others makes the funds check err on the side of refusing, never of
// admitting: the transactions it has not included yet count as unpaid at their highest fee
// cap, and what it has not seen arrive is not counted as funds.
func (m *MultiChain) AccountAt(ctx context.Context, account common.Address) (services.AccountState, error) {
	return via(m, ctx, "balance", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (services.AccountState, error) {
		return c.AccountAt(ctx, account)
	})
}

// OPStackFeeParams reads the latest L1 prices of an OP-stack chain (RPCChain.OPStackFeeParams).
func (m *MultiChain) OPStackFeeParams(ctx context.Context) (domain.OPStackFeeParams, error) {
	return via(m, ctx, "L1 prices", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (domain.OPStackFeeParams, error) {
		return c.OPStackFeeParams(ctx, nil)
	})
}

// EstimateGas implements services.Chain.
func (m *MultiChain) EstimateGas(ctx context.Context, req services.CallRequest) (uint64, error) {
	return via(m, ctx, "gas estimation", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (uint64, error) { return c.EstimateGas(ctx, req) })
}

// SuggestFees implements services.Chain. One suggestion serves every caller for
// cfg.FeeMaxAge (see sharedFees).
func (m *MultiChain) SuggestFees(ctx context.Context) (services.FeeSuggestion, error) {
	return m.fees.get(ctx, func(ctx context.Context) (services.FeeSuggestion, error) {
		return via(m, ctx, "fee suggestion", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (services.FeeSuggestion, error) { return c.SuggestFees(ctx) })
	})
}

// TransactionReceipts implements services.Chain.
func (m *MultiChain) TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]services.ReceiptResult, error) {
	return via(m, ctx, "receipts", m.cfg.ReceiptsTimeout, func(ctx context.Context, c *RPCChain) ([]services.ReceiptResult, error) {
		return c.TransactionReceipts(ctx, hashes)
	})
}

// BlockReceipts implements services.Chain. One endpoint serves the whole call; a block it
// does not have yet comes back nil, so a lagging endpoint only makes the scan shorter.
func (m *MultiChain) BlockReceipts(ctx context.Context, numbers []uint64) ([][]services.Receipt, error) {
	return via(m, ctx, "block receipts", m.cfg.ReceiptsTimeout, func(ctx context.Context, c *RPCChain) ([][]services.Receipt, error) {
		return c.BlockReceipts(ctx, numbers)
	})
}

// SentTransactions implements services.Chain. The scan is several requests; each has the
// receipts deadline.
func (m *MultiChain) SentTransactions(ctx context.Context, from common.Address, nonces []uint64, maxBlocks uint64) (map[uint64]services.SentTx, error) {
	return via(m, ctx, "sent transactions", m.cfg.ReceiptsTimeout*4, func(ctx context.Context, c *RPCChain) (map[uint64]services.SentTx, error) {
		return c.SentTransactions(ctx, from, nonces, maxBlocks)
	})
}

// ScanSent implements services.Chain. The scan is several requests; each has the receipts
// deadline.
func (m *MultiChain) ScanSent(ctx context.Context, from common.Address, first, maxBlocks, fromNonce uint64, limit int) (services.SentScan, error) {
	return via(m, ctx, "sent transactions scan", m.cfg.ReceiptsTimeout*4, func(ctx context.Context, c *RPCChain) (services.SentScan, error) {
		return c.ScanSent(ctx, from, first, maxBlocks, fromNonce, limit)
	})
}

// NonceAtBlock implements services.Chain.
func (m *MultiChain) NonceAtBlock(ctx context.Context, account common.Address, block uint64) (uint64, error) {
	return via(m, ctx, "nonce at block", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (uint64, error) { return c.NonceAtBlock(ctx, account, block) })
}

// TransactionsKnown implements services.Chain.
func (m *MultiChain) TransactionsKnown(ctx context.Context, hashes []common.Hash) ([]bool, error) {
	return via(m, ctx, "known transactions", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) ([]bool, error) { return c.TransactionsKnown(ctx, hashes) })
}

// HeadersByNumber implements services.Chain. One endpoint serves the whole batch, and a
// height beyond its head comes back nil: a header is only ever returned by an endpoint
// that has that height, so a hash that differs from a receipt's is a real reorg, never
// an endpoint that has not caught up.
func (m *MultiChain) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	return via(m, ctx, "headers", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) ([]*services.BlockHeader, error) {
		return c.HeadersByNumber(ctx, numbers)
	})
}

// LatestHeader implements services.Chain.
func (m *MultiChain) LatestHeader(ctx context.Context) (*services.BlockHeader, error) {
	return via(m, ctx, "head", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (*services.BlockHeader, error) { return c.LatestHeader(ctx) })
}

// FinalizedHeader implements services.Chain.
func (m *MultiChain) FinalizedHeader(ctx context.Context) (*services.BlockHeader, error) {
	return via(m, ctx, "finalized block", m.cfg.ReadTimeout, func(ctx context.Context, c *RPCChain) (*services.BlockHeader, error) { return c.FinalizedHeader(ctx) })
}

// SendRawTransactions implements services.Chain: to the best endpoint (failing over), or,
// with BroadcastToAll, to every usable endpoint at once.
func (m *MultiChain) SendRawTransactions(ctx context.Context, raws [][]byte) ([]error, error) {
	if err := m.holdError(); err != nil {
		return nil, err
	}
	order := m.order()
	if !m.cfg.BroadcastToAll || len(order) < 2 {
		var sentTo *RPCChain
		results, err := via(m, ctx, "broadcast", m.cfg.SendTimeout, func(ctx context.Context, c *RPCChain) ([]error, error) {
			sentTo = c
			return c.SendRawTransactions(ctx, raws)
		})
		if err != nil {
			return nil, err
		}
		m.retryPoolFull(ctx, order, sentTo, raws, results)
		return results, nil
	}
	type outcome struct {
		results []error
		err     error
	}
	outcomes := make([]outcome, len(order))
	var wg sync.WaitGroup
	for slot, i := range order {
		wg.Go(func() {
			callCtx, cancel := context.WithTimeout(ctx, m.cfg.SendTimeout)
			defer cancel()
			sent := time.Now()
			results, err := m.endpoints[i].Chain.SendRawTransactions(callCtx, raws)
			err = withoutURL(err, m.endpoints[i].Name)
			outcomes[slot] = outcome{results, err}
			switch {
			case endpointAnswered(err):
				m.markAnswered(i, 0, sent)
			case !callerGaveUp(ctx):
				m.markFailed(i, err, sent)
			}
		})
	}
	wg.Wait()
	var answered [][]error
	var failures []error
	for slot, o := range outcomes {
		if o.err != nil {
			failures = append(failures, fmt.Errorf("%s: %w", m.endpoints[order[slot]].Name, o.err))
			continue
		}
		answered = append(answered, o.results)
	}
	if len(answered) == 0 {
		return nil, fmt.Errorf("broadcast: %w: %w", services.ErrNoChainEndpoint, errors.Join(failures...))
	}
	return mergeBroadcastResults(answered), nil
}

// retryPoolFull sends the transactions whose endpoint answered that its pool is full to the
// other endpoints in turn, until one takes them or says something else about them: a full
// pool says nothing about the transaction, only about that node. results is updated in place.
func (m *MultiChain) retryPoolFull(ctx context.Context, order []int, tried *RPCChain, raws [][]byte, results []error) {
	for _, i := range order {
		if m.endpoints[i].Chain == tried {
			continue
		}
		var full []int
		for k, err := range results {
			if errors.Is(err, services.ErrPoolFull) {
				full = append(full, k)
			}
		}
		if len(full) == 0 || callerGaveUp(ctx) {
			return
		}
		subset := make([][]byte, len(full))
		for j, k := range full {
			subset[j] = raws[k]
		}
		callCtx, cancel := context.WithTimeout(ctx, m.cfg.SendTimeout)
		sent := time.Now()
		again, err := m.endpoints[i].Chain.SendRawTransactions(callCtx, subset)
		err = withoutURL(err, m.endpoints[i].Name)
		cancel()
		if !endpointAnswered(err) {
			if !callerGaveUp(ctx) {
				m.markFailed(i, err, sent)
			}
			continue
		}
		m.markAnswered(i, 0, sent)
		for j, k := range full {
			if !errors.Is(again[j], services.ErrPoolFull) {
				results[k] = again[j]
			}
		}
	}
}

// mergeBroadcastResults keeps, per transaction, the best outcome any endpoint reported:
// accepted, then already known, then any answer but a full pool (which says nothing about
// the transaction), then the preferred endpoint's error.
func mergeBroadcastResults(perEndpoint [][]error) []error {
	merged := append([]error(nil), perEndpoint[0]...)
	for _, results := range perEndpoint[1:] {
		for i, err := range results {
			switch {
			case merged[i] == nil:
			case err == nil:
				merged[i] = nil
			case errors.Is(err, services.ErrKnownTransaction) && !errors.Is(merged[i], services.ErrKnownTransaction):
				merged[i] = err
			case errors.Is(merged[i], services.ErrPoolFull) && !errors.Is(err, services.ErrPoolFull):
				merged[i] = err
			}
		}
	}
	return merged
}

// probeLoop reads every endpoint's head each interval, all at once, so one that hangs
// delays no other's probe.
func (m *MultiChain) probeLoop() {
	ticker := time.NewTicker(m.cfg.ProbeInterval)
	defer ticker.Stop()
	for {
		m.probeAll()
		select {
		case <-m.stop:
			return
		case <-ticker.C:
		}
	}
}

func (m *MultiChain) probeAll() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-m.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for i := range m.endpoints {
		wg.Go(func() { m.probe(ctx, i) })
	}
	wg.Wait()
}

func (m *MultiChain) probe(ctx context.Context, i int) {
	m.mu.Lock()
	limited := time.Now().Before(m.health[i].LimitedUntil)
	m.mu.Unlock()
	if limited {
		return // asked to wait: a probe would only count against its limit again
	}
	callCtx, cancel := context.WithTimeout(ctx, m.cfg.ReadTimeout)
	defer cancel()
	e := m.endpoints[i]
	sent := time.Now()
	head, err := e.Chain.LatestHeader(callCtx)
	err = withoutURL(err, e.Name)
	if err != nil {
		if !callerGaveUp(ctx) {
			m.markFailed(i, err, sent)
		}
		return
	}
	m.mu.Lock()
	expected, checked := m.identity, m.identityChecked[i]
	m.mu.Unlock()
	if expected != nil && !checked && !m.servesIdentity(callCtx, i, *expected) {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &m.health[i]
	if h.WrongChain {
		// Another probe found it on another chain meanwhile (this one read the identity as
		// checked once that probe had checked it): it is never used again.
		return
	}
	if time.Now().Before(h.LimitedUntil) || (!h.Reachable && !sent.After(h.failedSent)) {
		// Sent before a call was throttled, answered after: it stays aside for its pause.
		// Sent before a call that failed: the next probe asks again.
		h.Head = max(h.Head, head.Number)
		return
	}
	if !h.Reachable {
		m.log.Infow("msg", "chain endpoint answers again", "endpoint", h.Name, "head", head.Number)
	}
	// The probe sets the head outright: an endpoint that lost blocks (a reset, a deep
	// reorg) must be seen lagging, not at its old height.
	h.Reachable, h.LastError, h.Head = true, "", head.Number
}

// servesIdentity checks an endpoint against the verified chain the first time it answers
// after start, and each time it answers again after failing; an endpoint of another chain is
// marked and never used.
func (m *MultiChain) servesIdentity(ctx context.Context, i int, expected Identity) bool {
	sent := time.Now()
	id, err := identityOf(ctx, m.endpoints[i].Chain)
	if err != nil {
		m.markFailed(i, withoutURL(err, m.endpoints[i].Name), sent)
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.identityChecked[i] = true
	if id.ChainID.Cmp(expected.ChainID) == 0 && id.GenesisHash == expected.GenesisHash {
		return true
	}
	h := &m.health[i]
	h.WrongChain, h.Reachable = true, false
	h.LastError = fmt.Sprintf("serves chain id %s genesis %s, not chain id %s genesis %s", id.ChainID, id.GenesisHash.Hex(), expected.ChainID, expected.GenesisHash.Hex())
	m.log.Errorw("msg", "chain endpoint serves another chain; never using it", "endpoint", h.Name, "error", h.LastError)
	return false
}
