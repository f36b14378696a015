package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// fundingEtherPerSigner: 100 transfers of 21000 gas at devnet fees cost far less.
const fundingEtherPerSigner = 10

// secondChainID is the id of the run's second chain (txm-devchain next to the first, whose
// id is 1337, geth --dev's; anvil is started with it): the same keys send on both.
const secondChainID = 31337

// firstChainID is the id of the run's first chain, whichever node serves it.
const firstChainID = 1337

// runChain is one chain of the run.
type runChain struct {
	id   uint64
	name string
	url  string
	eth  *ethclient.Client
}

// timings are the phases the summary reports.
type timings struct {
	buildNode, buildService time.Duration
	createAll               time.Duration // first create sent -> last create answered
	createToConfirmed       time.Duration // first create sent -> every transaction CONFIRMED
}

// report is what the run found; run fills it as far as it got.
type report struct {
	// node names the first chain's implementation and its version ("geth Version: 1.17.8-stable").
	node         string
	chains       []*runChain
	signers      []common.Address
	perSigner    int
	txs          []*createdTx
	verification *verification
	timings      timings
	// confirmations is the service's confirmations.required.
	confirmations uint64
	// serviceLog is set once the service has stopped and its log was read.
	serviceLog *e2e.LogSummary
}

// run performs the whole check. Whatever happens, the deferred teardown stops what was
// started, newest first, and its failures join the run's error.
func run(ctx context.Context, opts options, out io.Writer) (rep *report, err error) {
	rep = &report{perSigner: opts.txsPerSigner}
	repo, err := e2e.FindRepo(opts.repo, "go.work", filepath.Join("txmanager-service", "go.mod"))
	if err != nil {
		return rep, err
	}
	workDir, err := os.MkdirTemp("", "txm-e2e-")
	if err != nil {
		return rep, fmt.Errorf("work dir: %w", err)
	}
	var td teardown
	defer func() {
		err = errors.Join(err, td.run(out))
		if opts.keepLogs != "" {
			err = errors.Join(err, keepLogs(workDir, opts.keepLogs, out))
		}
		err = errors.Join(err, os.RemoveAll(workDir))
	}()
	err = runSteps(ctx, opts, repo, workDir, &td, rep, out)
	return rep, err
}

func runSteps(ctx context.Context, opts options, repo, workDir string, td *teardown, rep *report, out io.Writer) error {
	t := &rep.timings
	bins, err := buildBinaries(ctx, opts, repo, workDir, out, t)
	if err != nil {
		return err
	}
	rep.node = bins.nodeName + " " + bins.nodeVersion

	ctx, cancel := context.WithTimeout(ctx, opts.timeout)
	defer cancel()

	step(out, "PostgreSQL")
	pg, err := e2e.FindPostgres(ctx)
	if err != nil {
		return err
	}
	td.add("PostgreSQL", pg.Close)
	db, err := pg.CreateDatabase(ctx, "txm_e2e")
	if err != nil {
		return err
	}
	td.add("drop database "+db.Name, func() error {
		dropCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return db.Drop(dropCtx)
	})
	fmt.Fprintf(out, "    %s, database %s\n", pg.Source, db.Name)

	node, err := startFirstChain(ctx, opts.chainClient, bins, workDir, out)
	if err != nil {
		return err
	}
	td.add(bins.nodeName, node.Stop)

	keys := e2e.Keys(opts.signers)
	signers := e2e.Addresses(keys)
	rep.signers = signers
	step(out, "funding %d signers with %d ETH each", len(signers), fundingEtherPerSigner)
	funding := new(big.Int).Mul(big.NewInt(fundingEtherPerSigner), big.NewInt(1e18))
	if err := e2e.FundAccounts(ctx, node.URL(), signers, funding); err != nil {
		return err
	}

	step(out, "txm-devchain, chain id %d, the same signers funded at genesis", secondChainID)
	devChain, err := e2e.StartDevChain(ctx, e2e.DevChainOptions{Bin: bins.devChain, ChainID: secondChainID, Fund: signers, Dir: filepath.Join(workDir, "devchain")})
	if err != nil {
		return err
	}
	td.add("txm-devchain", devChain.Stop)
	fmt.Fprintf(out, "    JSON-RPC %s\n", devChain.URL())
	rep.chains = []*runChain{{name: bins.nodeName, url: node.URL()}, {name: "txm-devchain", url: devChain.URL()}}
	targets := make([]e2e.ChainTarget, len(rep.chains))
	chainIDs := make([]uint64, len(rep.chains))
	for i, c := range rep.chains {
		if c.eth, err = ethclient.DialContext(ctx, c.url); err != nil {
			return fmt.Errorf("dial %s: %w", c.name, err)
		}
		td.add("close "+c.name+" client", func() error { c.eth.Close(); return nil })
		id, err := c.eth.ChainID(ctx)
		if err != nil {
			return fmt.Errorf("%s: chain id: %w", c.name, err)
		}
		c.id = id.Uint64()
		targets[i], chainIDs[i] = e2e.ChainTarget{ID: c.id, RPCURL: c.url}, c.id
	}
	if chainIDs[0] == chainIDs[1] {
		return fmt.Errorf("both chains have id %d", chainIDs[0])
	}

	step(out, "txmanager-service")
	config := e2e.FastLoops(e2e.ServiceConfig{
		NodeID:      "txm-e2e-1",
		DatabaseDSN: db.DSN,
		Chains:      targets,
		Signers:     keys,
	})
	rep.confirmations = config.Confirmations
	svc, err := e2e.StartService(ctx, e2e.ServiceOptions{
		Bin:    bins.service,
		Config: config,
		Dir:    filepath.Join(workDir, "service"),
	})
	if err != nil {
		return err
	}
	logPath := svc.LogPath()
	// Read after the service has stopped, so shutdown complaints count too: the teardown
	// runs newest first, so this comes right after the stop below.
	td.add("read service log", func() error {
		summary, err := e2e.ScanLogFile(logPath)
		rep.serviceLog = &summary
		return err
	})
	td.add("stop txmanager-service", svc.Stop)
	fmt.Fprintf(out, "    HTTP %s, gRPC %s\n", svc.HTTPURL(), svc.GRPCAddr())
	watch := processWatch{"txmanager-service": svc.Exited(), bins.nodeName: node.Exited(), "txm-devchain": devChain.Exited()}

	client := e2e.NewClient(svc.HTTPURL())
	step(out, "creating %d chains x %d signers x %d transactions, %d at a time", len(chainIDs), len(signers), opts.txsPerSigner, opts.parallel)
	loadStart := time.Now()
	txs, err := createAll(ctx, client, chainIDs, signers, opts.txsPerSigner, opts.parallel)
	t.createAll = time.Since(loadStart)
	rep.txs = txs
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "    %d created in %s\n", len(txs), t.createAll.Round(time.Millisecond))

	step(out, "waiting until every transaction is CONFIRMED")
	if err := waitConfirmed(ctx, client, txs, opts.parallel, watch, out); err != nil {
		return err
	}
	t.createToConfirmed = time.Since(loadStart)

	step(out, "checking both chains and the completion feed")
	v, err := verify(ctx, rep.chains, client, signers, txs, uint64(opts.txsPerSigner), opts.parallel)
	if err != nil {
		return err
	}
	rep.verification = v
	return v.err()
}

// binaries are what buildBinaries built or found.
type binaries struct {
	node        string // the first chain's node: geth or anvil
	nodeName    string
	nodeVersion string // as the node reports it
	service     string
	devChain    string
}

// startFirstChain starts the run's first chain on the node implementation client names.
func startFirstChain(ctx context.Context, client string, bins binaries, workDir string, out io.Writer) (*e2e.ChainNode, error) {
	var node *e2e.ChainNode
	var err error
	switch client {
	case "anvil":
		step(out, "anvil %s, chain id %d, a block every second", bins.nodeVersion, firstChainID)
		node, err = e2e.StartAnvil(ctx, e2e.AnvilOptions{Bin: bins.node, BlockTime: time.Second, ChainID: firstChainID, Dir: filepath.Join(workDir, "anvil")})
	default:
		step(out, "geth %s --dev --dev.period 1", bins.nodeVersion)
		node, err = e2e.StartGeth(ctx, e2e.GethOptions{Bin: bins.node, Period: time.Second, Dir: filepath.Join(workDir, "geth")})
	}
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "    JSON-RPC %s (binary in %s)\n", node.URL(), filepath.Dir(bins.node))
	return node, nil
}

// buildBinaries builds geth into the repository's bin/ (reused across runs: the first build
// takes minutes), or finds anvil, and builds the service into the run's folder.
func buildBinaries(ctx context.Context, opts options, repo, workDir string, out io.Writer, t *timings) (binaries, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.buildTimeout)
	defer cancel()
	var bins binaries
	var err error
	start := time.Now()
	switch opts.chainClient {
	case "anvil":
		step(out, "anvil %s from %s", e2e.AnvilVersion, e2e.TestBinDir)
		if bins.node, err = e2e.FindAnvil(); err != nil {
			return binaries{}, err
		}
		bins.nodeName, bins.nodeVersion = "anvil", "Version: "+e2e.AnvilVersion
	case "geth":
		step(out, "geth %s into %s (skipped when already built)", e2e.GethModuleVersion, filepath.Join(repo, "bin"))
		if bins.node, bins.nodeVersion, err = e2e.BuildGeth(ctx, filepath.Join(repo, "bin")); err != nil {
			return binaries{}, err
		}
		bins.nodeName, bins.nodeVersion = "geth", "Version: "+bins.nodeVersion
	default:
		return binaries{}, fmt.Errorf("-chain-client %q: want geth or anvil", opts.chainClient)
	}
	t.buildNode = time.Since(start)
	fmt.Fprintf(out, "    %s (%s)\n", bins.nodeVersion, t.buildNode.Round(time.Millisecond))

	step(out, "building txmanager-service")
	start = time.Now()
	if bins.service, err = e2e.BuildService(ctx, filepath.Join(repo, "txmanager-service"), filepath.Join(workDir, "bin")); err != nil {
		return binaries{}, err
	}
	if bins.devChain, err = e2e.BuildDevChain(ctx, filepath.Join(repo, "txmanager-service"), filepath.Join(workDir, "bin")); err != nil {
		return binaries{}, err
	}
	t.buildService = time.Since(start)
	fmt.Fprintf(out, "    built in %s\n", t.buildService.Round(time.Millisecond))
	return bins, nil
}
