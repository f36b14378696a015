package conf

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Confirmations sets finality.
type Confirmations struct {
	Required        uint64 `json:"required"`
	UseFinalizedTag bool   `json:"useFinalizedTag"`
}

// Fees caps and bumps EIP-1559 fees; caps are wei as decimal strings ("" = no cap).
type Fees struct {
	// MaxFeePerGas caps the fee cap of anything signed, in wei ("" = no cap).
	MaxFeePerGas string `json:"maxFeePerGas"`
	// MaxPriorityFeePerGas caps the priority fee (tip), in wei ("" = no cap).
	MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas"`
	// MinPriorityFeePerGas is the lowest tip signed, in wei ("" = none): networks whose
	// validators ignore lower tips (Polygon PoS) leave such transactions unmined.
	MinPriorityFeePerGas string `json:"minPriorityFeePerGas"`
	// NodeTxFeeCap is the most a node takes for one transaction's fee, gas limit x fee cap,
	// in wei ("" = no such limit): go-ethereum, reth, bor and Erigon refuse more
	// (--rpc.txfeecap, 1 ether by default). Nothing the service prices goes above it, and an
	// intent naming more is refused before a nonce.
	NodeTxFeeCap      string `json:"nodeTxFeeCap"`
	BumpPercent       int64  `json:"bumpPercent"`
	BaseFeeMultiplier int64  `json:"baseFeeMultiplier"`
}

// Chain is one chain the service serves: its endpoints (or the embedded chain), timeouts
// and health checks, and per-chain overrides.
type Chain struct {
	// ID is the chain's id: required in chains, optional in the single-chain form. When
	// set, endpoints serving another chain are refused and the embedded chain runs under it.
	ID uint64 `json:"id"`
	// RPCURL is one JSON-RPC endpoint, or several separated by commas (handy in one
	// environment variable); RPCURLs lists more. Together, in order of preference, they are
	// the chain's endpoints; none runs the embedded simulated chain.
	RPCURL string `json:"rpcUrl"`
	// RPCURLs lists endpoints beyond RPCURL, in order of preference.
	RPCURLs []string `json:"rpcUrls"`
	// BroadcastToAll sends every signed transaction to every healthy endpoint, not just the
	// preferred one, so a transaction reaches the network even when one node's peering is poor.
	BroadcastToAll bool `json:"broadcastToAll"`
	// RPCCompression asks HTTP endpoints to gzip their answers: worth it over a slow or
	// metered link to a hosted endpoint, CPU spent on both sides for nothing next to the node.
	RPCCompression bool          `json:"rpcCompression"`
	Timeouts       ChainTimeouts `json:"timeouts"`
	Health         ChainHealth   `json:"health"`
	Embedded       EmbeddedChain `json:"embedded"`
	// Confirmations and Fees replace the top-level ones for this chain (chains only).
	Confirmations *Confirmations `json:"confirmations,omitempty"`
	Fees          *Fees          `json:"fees,omitempty"`
	// BlockTime is the chain's usual block interval, a hint: receipts are looked for once
	// per block instead of at pipeline.receipts.pollInterval.
	BlockTime Duration `json:"blockTime"`
	// Preset names a known network (ethereum, optimism, base, arbitrum, polygon) whose
	// documented finality, block time, fee model and minimum tip fill what this entry
	// leaves unset; anything set here wins.
	Preset string `json:"preset"`
	// FeeModel is what a transaction pays besides its gas: FeeModelEthereum (nothing) or
	// FeeModelOPStack (an L1 data fee, counted by the funds check and in the fee paid).
	FeeModel string `json:"feeModel"`
}

// Fee models a chain can declare (chain.feeModel).
const (
	FeeModelEthereum = "ethereum"
	FeeModelOPStack  = "op-stack"
)

// ChainPreset is what one known network's public documentation says about it.
type ChainPreset struct {
	// UseFinalizedTag: finality follows the node's "finalized" block.
	UseFinalizedTag bool
	BlockTime       Duration
	FeeModel        string
	// MinPriorityFeePerGas in wei ("" = none).
	MinPriorityFeePerGas string
}

// ChainPresets are the networks chain.preset knows. Each follows its operator's
// documentation (docs/chains.md cites it): every one serves the "finalized" tag; OP
// Mainnet and Base make a block every 2 s and charge the L1 data fee; Arbitrum One folds
// its L1 cost into gas used and makes a block about every 250 ms; Polygon PoS makes one
// about every 2 s and its validators take no tip under 30 gwei.
var ChainPresets = map[string]ChainPreset{
	"ethereum": {UseFinalizedTag: true, BlockTime: Duration(12 * time.Second), FeeModel: FeeModelEthereum},
	"optimism": {UseFinalizedTag: true, BlockTime: Duration(2 * time.Second), FeeModel: FeeModelOPStack},
	"base":     {UseFinalizedTag: true, BlockTime: Duration(2 * time.Second), FeeModel: FeeModelOPStack},
	"arbitrum": {UseFinalizedTag: true, BlockTime: Duration(250 * time.Millisecond), FeeModel: FeeModelEthereum},
	"polygon":  {UseFinalizedTag: true, BlockTime: Duration(2 * time.Second), FeeModel: FeeModelEthereum, MinPriorityFeePerGas: "30000000000"},
}

// presetNames lists ChainPresets' keys in order, for messages.
func presetNames() string {
	names := slices.Sorted(maps.Keys(ChainPresets))
	return strings.Join(names, ", ")
}

// applyPreset fills what the view's chain preset documents and the configuration left
// unset: finality (when neither a count nor the tag is set), block time, fee model and
// minimum tip. An unknown preset changes nothing here; the checks name it.
func (b *Bootstrap) applyPreset(confirmationsSet bool) {
	preset, ok := ChainPresets[b.Chain.Preset]
	if !ok {
		return
	}
	if !confirmationsSet && b.Confirmations.Required == 0 && !b.Confirmations.UseFinalizedTag {
		b.Confirmations.UseFinalizedTag = preset.UseFinalizedTag
	}
	orDefault(&b.Chain.BlockTime, preset.BlockTime)
	orDefault(&b.Chain.FeeModel, preset.FeeModel)
	orDefault(&b.Fees.MinPriorityFeePerGas, preset.MinPriorityFeePerGas)
}

// ChainViews is the configuration each chain runs with: for the single-chain form the
// whole configuration, for chains one copy per entry whose chain is the entry (its unset
// settings taken from chain) with the entry's confirmations, fees and block time applied.
// Everything that is not per chain (database, servers, signers) is shared by the copies.
func (b *Bootstrap) ChainViews() []*Bootstrap {
	if len(b.Chains) == 0 {
		if b.Chain.Preset == "" && b.Chain.BlockTime == 0 {
			return []*Bootstrap{b.withDefaultConfirmations()}
		}
		view := *b
		view.applyPreset(false)
		if view.Chain.BlockTime > 0 {
			view.Pipeline.Receipts.PollInterval = view.Chain.BlockTime
		}
		return []*Bootstrap{view.withDefaultConfirmations()}
	}
	views := make([]*Bootstrap, 0, len(b.Chains))
	for _, entry := range b.Chains {
		view := *b
		view.Chain = entry.withDefaults(b.Chain)
		if entry.Fees != nil {
			view.Fees = b.Fees.overriddenBy(*entry.Fees)
		}
		// Finality: the entry's own, else its preset's, else the top-level one.
		switch _, known := ChainPresets[entry.Preset]; {
		case entry.Confirmations != nil:
			view.Confirmations = *entry.Confirmations
		case known:
			view.Confirmations = Confirmations{}
		}
		view.applyPreset(entry.Confirmations != nil)
		if entry.Confirmations == nil {
			view.Confirmations = view.withDefaultConfirmations().Confirmations
		}
		if view.Chain.BlockTime > 0 {
			view.Pipeline.Receipts.PollInterval = view.Chain.BlockTime
		}
		views = append(views, &view)
	}
	return views
}

// The confirmations a chain requires when confirmations.required is 0 (unset): a real
// chain can reorganise, the embedded simulated chain never does.
const (
	DefaultConfirmations       = 20
	EmbeddedChainConfirmations = 2
)

// withDefaultConfirmations is b with an unset confirmations.required filled in for its
// chain (b itself when it is set, or when finality follows the finalized tag).
func (b *Bootstrap) withDefaultConfirmations() *Bootstrap {
	if b.Confirmations.Required != 0 || b.Confirmations.UseFinalizedTag {
		return b
	}
	view := *b
	view.Confirmations.Required = DefaultConfirmations
	if len(b.Chain.Endpoints()) == 0 {
		view.Confirmations.Required = EmbeddedChainConfirmations
	}
	return &view
}

// ServesSeveralChains reports whether chains names the chains: then every create names
// its chain (when there is more than one) and a chain new to the database is recorded.
func (b *Bootstrap) ServesSeveralChains() bool { return len(b.Chains) > 0 }

// withDefaults fills the entry's unset connection settings from defaults.
func (c Chain) withDefaults(defaults Chain) Chain {
	orDefault(&c.Timeouts.Read, defaults.Timeouts.Read)
	orDefault(&c.Timeouts.Send, defaults.Timeouts.Send)
	orDefault(&c.Timeouts.Receipts, defaults.Timeouts.Receipts)
	orDefault(&c.Health.ProbeInterval, defaults.Health.ProbeInterval)
	orDefault(&c.Health.MaxLagBlocks, defaults.Health.MaxLagBlocks)
	orDefault(&c.Embedded.BlockInterval, defaults.Embedded.BlockInterval)
	orDefault(&c.Embedded.DevAccounts, defaults.Embedded.DevAccounts)
	// The entry's preset names its fee model before the top-level one does: an OP-stack
	// entry under a top-level ethereum model still counts the L1 data fee.
	if preset, known := ChainPresets[c.Preset]; !known || preset.FeeModel == "" {
		orDefault(&c.FeeModel, defaults.FeeModel)
	}
	return c
}

// overriddenBy is f with the settings entry names replaced: a chain's fees block changes
// what it names and keeps the rest (the node's fee cap above all), not the whole block.
func (f Fees) overriddenBy(entry Fees) Fees {
	for _, s := range []struct{ setting, override *string }{
		{&f.MaxFeePerGas, &entry.MaxFeePerGas}, {&f.MaxPriorityFeePerGas, &entry.MaxPriorityFeePerGas},
		{&f.MinPriorityFeePerGas, &entry.MinPriorityFeePerGas}, {&f.NodeTxFeeCap, &entry.NodeTxFeeCap},
	} {
		if *s.override != "" {
			*s.setting = *s.override
		}
	}
	if entry.BumpPercent != 0 {
		f.BumpPercent = entry.BumpPercent
	}
	if entry.BaseFeeMultiplier != 0 {
		f.BaseFeeMultiplier = entry.BaseFeeMultiplier
	}
	return f
}

// orDefault sets an unset (zero) setting to its default.
func orDefault[T comparable](setting *T, def T) {
	var unset T
	if *setting == unset {
		*setting = def
	}
}

// ChainTimeouts bound every call to an endpoint: a node that accepts a connection and never
// answers costs one timeout, then the call fails over or fails.
type ChainTimeouts struct {
	// Read bounds one read call to one endpoint (a head, a nonce, a balance, an estimate).
	Read Duration `json:"read"`
	// Send bounds one broadcast call to one endpoint.
	Send Duration `json:"send"`
	// Receipts bounds one batched receipt look-up (a block scan takes several).
	Receipts Duration `json:"receipts"`
}

// ChainHealth is how endpoints are watched: each is probed every ProbeInterval; one that
// fails is skipped until it answers again, and one whose head trails the best endpoint by
// more than MaxLagBlocks serves only when nothing better does.
type ChainHealth struct {
	// ProbeInterval between probes of each endpoint's head.
	ProbeInterval Duration `json:"probeInterval"`
	// MaxLagBlocks: an endpoint this far behind the best head serves only when nothing better
	// does. 0: 3 blocks, or the blocks of 3 s where the chain makes them quicker (12 on Arbitrum).
	MaxLagBlocks uint64 `json:"maxLagBlocks"`
}

// Unset health.maxLagBlocks: an endpoint may trail the best head by defaultLagBlocks, or by
// the blocks the chain makes in defaultLagTime where those are more.
const (
	defaultLagBlocks = 3
	defaultLagTime   = 3 * time.Second
)

// LagBlocks is how far behind the best head an endpoint may trail before it serves only when
// nothing better does: Health.MaxLagBlocks, or, unset, 3 blocks or as many as the chain makes
// in 3 s where its blocks are quicker (12 at Arbitrum's 250 ms), so that heads read a moment
// apart on a fast chain do not turn a healthy endpoint into a last resort.
func (c Chain) LagBlocks() uint64 {
	if c.Health.MaxLagBlocks != 0 {
		return c.Health.MaxLagBlocks
	}
	blocks := uint64(defaultLagBlocks)
	if blockTime := c.BlockTime.Std(); blockTime > 0 {
		blocks = max(blocks, uint64((defaultLagTime+blockTime-1)/blockTime))
	}
	return blocks
}

// Endpoints are the configured JSON-RPC URLs in order of preference, without duplicates.
func (c Chain) Endpoints() []string {
	var urls []string
	for _, u := range append(strings.Split(c.RPCURL, ","), c.RPCURLs...) {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls
}

// EmbeddedChain is the simulated chain a development start runs when no endpoint is set.
type EmbeddedChain struct {
	// BlockInterval: the embedded chain mines a block this often.
	BlockInterval Duration `json:"blockInterval"`
	// DevAccounts: how many funded development accounts the embedded chain starts with (each a signer in development).
	DevAccounts int `json:"devAccounts"`
	// HTTPAddr exposes the embedded chain's JSON-RPC there (empty: in-process only).
	HTTPAddr string `json:"httpAddr"`
}

// checkChains checks each chains entry and every chain as it will run (its view): ids,
// endpoints, timeouts, confirmations and fees, each named by the key the file wrote.
func (b *Bootstrap) checkChains(p *problems) {
	firstWith := map[uint64]int{}
	for i, entry := range b.Chains {
		key := fmt.Sprintf("chains[%d]", i)
		p.require(entry.ID > 0, key+".id", "must be set (the chain's id, e.g. 1 for Ethereum mainnet)")
		if first, seen := firstWith[entry.ID]; seen && entry.ID > 0 {
			p.add(fmt.Errorf("%s.id: is listed twice (as chains[%d].id too)", key, first))
		} else {
			firstWith[entry.ID] = i
		}
		p.require(entry.BlockTime >= 0, key+".blockTime", "must not be negative")
	}
	presetKey, feeModelKey := "chain.preset", "chain.feeModel"
	for i, c := range append([]Chain{b.Chain}, b.Chains...) {
		if i > 0 {
			presetKey, feeModelKey = fmt.Sprintf("chains[%d].preset", i-1), fmt.Sprintf("chains[%d].feeModel", i-1)
		}
		_, known := ChainPresets[c.Preset]
		p.require(c.Preset == "" || known, presetKey, "%s", fmt.Sprintf("%q is not a preset: use one of %s, or none", c.Preset, presetNames()))
		p.require(c.FeeModel == "" || c.FeeModel == FeeModelEthereum || c.FeeModel == FeeModelOPStack, feeModelKey, "%s",
			fmt.Sprintf("%q is not a fee model: use %s (gas only) or %s (gas plus the L1 data fee)", c.FeeModel, FeeModelEthereum, FeeModelOPStack))
	}
	for i, view := range b.ChainViews() {
		// Keys as the file names them: chain.* for the one chain, chains[i].* for an entry,
		// and the top-level confirmations and fees unless the entry overrides them.
		chainKey, confirmationsKey, feesKey := "chain", "confirmations", "fees"
		if b.ServesSeveralChains() {
			chainKey = fmt.Sprintf("chains[%d]", i)
			if b.Chains[i].Confirmations != nil {
				confirmationsKey = chainKey + ".confirmations"
			}
			if b.Chains[i].Fees != nil {
				feesKey = chainKey + ".fees"
			}
		}
		for _, u := range view.Chain.Endpoints() {
			p.require(isJSONRPCURL(u), endpointKey(chainKey, b.chainEntry(i), u), "is not a JSON-RPC URL (http, https, ws or wss, and a host)")
		}
		p.require(len(view.Chain.Endpoints()) > 0 || view.Chain.Embedded.BlockInterval > 0, chainKey+".embedded.blockInterval",
			"must be positive when no chain endpoint is configured")
		p.positive(view.Chain.Timeouts.Read, chainKey+".timeouts.read")
		p.positive(view.Chain.Timeouts.Send, chainKey+".timeouts.send")
		p.positive(view.Chain.Timeouts.Receipts, chainKey+".timeouts.receipts")
		p.positive(view.Chain.Health.ProbeInterval, chainKey+".health.probeInterval")
		p.require(view.Confirmations.Required > 0 || view.Confirmations.UseFinalizedTag, confirmationsKey+".required", "must be positive")
		for _, fee := range []struct{ key, value string }{
			{".maxFeePerGas", view.Fees.MaxFeePerGas}, {".maxPriorityFeePerGas", view.Fees.MaxPriorityFeePerGas}, {".minPriorityFeePerGas", view.Fees.MinPriorityFeePerGas}, {".nodeTxFeeCap", view.Fees.NodeTxFeeCap},
		} {
			n, err := domain.ParseOptionalWei(feesKey+fee.key, fee.value)
			p.require(err == nil && (n == nil || n.Sign() > 0), feesKey+fee.key, "must be a positive number of wei")
		}
		p.require(view.Fees.BumpPercent >= 10, feesKey+".bumpPercent", "must be at least 10 (nodes refuse smaller replacements)")
	}
}
