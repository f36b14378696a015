package conf_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A chains list loads from YAML; each chain's view takes its own endpoints, confirmations,
// fees and block time and inherits the rest from chain, and nothing leaks between views.
func TestChainViews(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	body := `
chain:
  timeouts: {read: 7s}
  feeModel: ethereum
chains:
  - id: 1
    rpcUrl: "http://eth.example"
    confirmations: {useFinalizedTag: true}
  - id: 137
    rpcUrls: ["http://polygon-a.example", "http://polygon-b.example"]
    confirmations: {required: 64}
    fees: {maxFeePerGas: "500000000000", bumpPercent: 15}
    blockTime: 2s
    timeouts: {read: 3s}
  - id: 10
    rpcUrl: "http://op.example"
    preset: optimism
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://example/db")
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if !bc.ServesSeveralChains() {
		t.Fatal("a chains list does not count as several chains")
	}
	views := bc.ChainViews()
	if len(views) != 3 {
		t.Fatalf("%d views, want 3", len(views))
	}
	eth, polygon, op := views[0], views[1], views[2]
	tests := []struct {
		name      string
		got, want any
	}{
		{"ids", []uint64{eth.Chain.ID, polygon.Chain.ID, op.Chain.ID}, []uint64{1, 137, 10}},
		{"endpoints of the first", strings.Join(eth.Chain.Endpoints(), ","), "http://eth.example"},
		{"endpoints of the second", strings.Join(polygon.Chain.Endpoints(), ","), "http://polygon-a.example,http://polygon-b.example"},
		{"read timeout inherited from chain", eth.Chain.Timeouts.Read.Std(), 7 * time.Second},
		{"read timeout of its own", polygon.Chain.Timeouts.Read.Std(), 3 * time.Second},
		{"send timeout from the defaults", polygon.Chain.Timeouts.Send.Std(), bc.Chain.Timeouts.Send.Std()},
		{"finalized tag on the first only", []bool{eth.Confirmations.UseFinalizedTag, polygon.Confirmations.UseFinalizedTag}, []bool{true, false}},
		{"confirmations of the second", polygon.Confirmations.Required, uint64(64)},
		{"fee cap of the second", polygon.Fees.MaxFeePerGas, "500000000000"},
		{"fees of the first are the top-level ones", eth.Fees.BumpPercent, bc.Fees.BumpPercent},
		// A fees block changes what it names: the node's fee cap stays.
		{"the node fee cap kept under a fees block", polygon.Fees.NodeTxFeeCap, bc.Fees.NodeTxFeeCap},
		{"bump of the second", polygon.Fees.BumpPercent, int64(15)},
		// The entry's preset names its fee model before the top-level one.
		{"an OP-stack preset's fee model under a top-level ethereum one", op.Chain.FeeModel, conf.FeeModelOPStack},
		{"block time sets the receipt poll", polygon.Pipeline.Receipts.PollInterval.Std(), 2 * time.Second},
		{"no block time keeps the poll", eth.Pipeline.Receipts.PollInterval, bc.Pipeline.Receipts.PollInterval},
		{"shared settings stay shared", eth.Database.DSN, polygon.Database.DSN},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, want := fmt.Sprint(tt.got), fmt.Sprint(tt.want); got != want {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}

	single, err := conf.Load("")
	if err != nil {
		t.Fatal(err)
	}
	if views := single.ChainViews(); single.ServesSeveralChains() || len(views) != 1 || views[0].Chain.RPCURL != single.Chain.RPCURL || views[0].Database != single.Database {
		t.Error("without chains the configuration itself is the one view")
	}
}

// An unset confirmations.required is 20 on a real chain and 2 on the embedded chain; a
// set one, or the finalized tag, is kept.
func TestConfirmationsDefaultByChain(t *testing.T) {
	tests := []struct {
		name         string
		rpcURL       string
		required     uint64
		finalizedTag bool
		wantRequired uint64
	}{
		{"embedded chain, unset", "", 0, false, conf.EmbeddedChainConfirmations},
		{"real chain, unset", "http://node.example", 0, false, conf.DefaultConfirmations},
		{"embedded chain, set", "", 7, false, 7},
		{"real chain, set", "http://node.example", 1, false, 1},
		{"finalized tag", "http://node.example", 0, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bc, err := conf.Load("")
			if err != nil {
				t.Fatal(err)
			}
			bc.Chain.RPCURL, bc.Confirmations.Required, bc.Confirmations.UseFinalizedTag = tt.rpcURL, tt.required, tt.finalizedTag
			if got := bc.ChainViews()[0].Confirmations.Required; got != tt.wantRequired {
				t.Fatalf("confirmations.required %d, want %d", got, tt.wantRequired)
			}
		})
	}
}

// A preset fills what its network documents where the entry leaves it unset, and anything
// the entry sets wins; an unknown preset or fee model is refused with the choices.
func TestChainPresets(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	body := `
confirmations: {required: 5}
chains:
  - {id: 10, rpcUrl: "http://op.example", preset: optimism}
  - {id: 137, rpcUrl: "http://polygon.example", preset: polygon, blockTime: 3s, fees: {minPriorityFeePerGas: "40000000000", bumpPercent: 12}}
  - {id: 8453, rpcUrl: "http://base.example", preset: base, confirmations: {required: 30}, feeModel: ethereum}
  - {id: 31337, rpcUrl: "http://dev.example"}
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://example/db")
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	views := bc.ChainViews()
	op, polygon, base, dev := views[0], views[1], views[2], views[3]
	tests := []struct {
		name      string
		got, want any
	}{
		{"optimism: L1 data fee", op.Chain.FeeModel, conf.FeeModelOPStack},
		{"optimism: finalized tag", op.Confirmations.UseFinalizedTag, true},
		{"optimism: 2 s blocks, receipts looked for per block", []time.Duration{op.Chain.BlockTime.Std(), op.Pipeline.Receipts.PollInterval.Std()}, []time.Duration{2 * time.Second, 2 * time.Second}},
		{"polygon: its own block time wins", polygon.Chain.BlockTime.Std(), 3 * time.Second},
		{"polygon: its own minimum tip wins", polygon.Fees.MinPriorityFeePerGas, "40000000000"},
		{"polygon: gas only", polygon.Chain.FeeModel, conf.FeeModelEthereum},
		{"base: its own confirmations win", []any{base.Confirmations.Required, base.Confirmations.UseFinalizedTag}, []any{uint64(30), false}},
		{"base: its own fee model wins", base.Chain.FeeModel, conf.FeeModelEthereum},
		{"no preset: the top-level confirmations", dev.Confirmations.Required, uint64(5)},
		{"no preset: no fee model named (gas only)", dev.Chain.FeeModel, ""},
	}
	for _, tc := range tests {
		if fmt.Sprint(tc.got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if p := conf.ChainPresets["polygon"].MinPriorityFeePerGas; p != "30000000000" {
		t.Errorf("polygon's documented minimum tip is 30 gwei, the preset has %s wei", p)
	}

	for _, bad := range []struct{ body, want string }{
		{"chains:\n  - {id: 10, rpcUrl: http://a.example, preset: solana}\n", `chains[0].preset: "solana" is not a preset: use one of arbitrum, base, ethereum, optimism, polygon`},
		{"chain:\n  feeModel: zk\n", `chain.feeModel: "zk" is not a fee model`},
		{"chain:\n  preset: mainnet\n", `chain.preset: "mainnet" is not a preset`},
		{"fees:\n  minPriorityFeePerGas: \"-5\"\n", "fees.minPriorityFeePerGas: must be a positive number of wei"},
	} {
		path := filepath.Join(t.TempDir(), "bad.yaml")
		if err := os.WriteFile(path, []byte(bad.body), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := conf.Load(path); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: err = %v, want %q", bad.body, err, bad.want)
		}
	}
}

// In the single-chain form a block time of its own sets the receipt poll, as a preset's does.
func TestASingleChainsBlockTimeSetsTheReceiptPoll(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte("chain:\n  blockTime: 5s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://example/db")
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if views := bc.ChainViews(); len(views) != 1 || views[0].Pipeline.Receipts.PollInterval.Std() != 5*time.Second {
		t.Fatalf("the receipt poll is %v, want the block time, 5s", views[0].Pipeline.Receipts.PollInterval.Std())
	}
}

// An endpoint may trail the best head by health.maxLagBlocks; unset, by 3 blocks or the
// blocks of 3 s where a chain makes them quicker, so that on Arbitrum (250 ms blocks) heads
// read a moment apart do not turn a healthy endpoint into a last resort.
func TestEndpointLagIsCountedInTheChainsOwnBlocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	body := `
chains:
  - {id: 1, rpcUrl: "http://eth.example", preset: ethereum}
  - {id: 42161, rpcUrl: "http://arb.example", preset: arbitrum}
  - {id: 8453, rpcUrl: "http://base.example", preset: base}
  - {id: 99, rpcUrl: "http://fast.example", blockTime: 400ms}
  - {id: 42170, rpcUrl: "http://nova.example", preset: arbitrum, health: {maxLagBlocks: 40}}
  - {id: 31337, rpcUrl: "http://dev.example"}
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DATABASE_URL", "postgres://example/db")
	bc, err := conf.Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	views := bc.ChainViews()
	for i, want := range []uint64{3, 12, 3, 8, 40, 3} {
		if got := views[i].Chain.LagBlocks(); got != want {
			t.Errorf("chain %d (preset %q, block time %s): may trail by %d blocks, want %d", views[i].Chain.ID, views[i].Chain.Preset, views[i].Chain.BlockTime.Std(), got, want)
		}
	}
}
