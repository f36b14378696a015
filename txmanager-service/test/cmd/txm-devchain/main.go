// Command txm-devchain runs the embedded simulated chain as a standalone node on loopback
// JSON-RPC, so several service processes (the fault-injection suite, a local cluster) can
// share one chain.
//
//	txm-devchain -http 127.0.0.1:8545 -block-interval 1s -accounts 10
//
// It prints the endpoint (with -http host:0, the port the kernel picked) and the funded
// development addresses; the accounts' private keys are the deterministic development keys
// (chain.DevKey), printed only with -print-keys (or alone, without starting a chain, with
// -keys-only).
//
// With -seal-on-stdin every line "seal" on standard input seals one block (with
// -block-interval 0, the only blocks there are): a benchmark that decides when blocks come
// drives the chain from its own process while the chain's CPU is counted in this one.
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "txm-devchain:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("http", "127.0.0.1:8545", "JSON-RPC listen address (loopback); port 0 picks a free one, printed at start")
	interval := flag.Duration("block-interval", time.Second, "seal a block this often (0: only on -seal-on-stdin's command)")
	sealOnStdin := flag.Bool("seal-on-stdin", false, `seal a block for every line "seal" read on standard input; the chain stops when the input ends`)
	accounts := flag.Int("accounts", 10, "funded development accounts")
	chainID := flag.Uint64("chain-id", chain.SimulatedChainID, "the chain's id (several dev chains side by side need different ones)")
	fund := flag.String("fund", "", "further addresses funded at genesis, comma-separated")
	printKeys := flag.Bool("print-keys", false, "also print the development private keys (public knowledge: never fund them elsewhere)")
	keysOnly := flag.Bool("keys-only", false, "print the development private keys, one per line, and exit without starting a chain (for scanning logs for leaked keys)")
	flag.Parse()

	keyHex := func(key *ecdsa.PrivateKey) string { return hex.EncodeToString(crypto.FromECDSA(key)) }
	if *keysOnly {
		keys, err := chain.DevKeys(*accounts)
		if err != nil {
			return err
		}
		for _, key := range keys {
			fmt.Println(keyHex(key))
		}
		return nil
	}
	var extra []common.Address
	for _, a := range strings.Split(*fund, ",") {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if !common.IsHexAddress(a) {
			return fmt.Errorf("-fund: %q is not an address", a)
		}
		extra = append(extra, common.HexToAddress(a))
	}
	sim, err := chain.NewSimulated(chain.SimulatedConfig{BlockInterval: *interval, DevAccounts: *accounts, HTTPAddr: *addr, TxPoolSlots: 100_000,
		ChainID: *chainID, ExtraFunded: extra})
	if err != nil {
		return err
	}
	defer func() { _ = sim.Close() }()
	// test/e2e reads the endpoint from this line (devChainLine): keep its shape.
	fmt.Printf("dev chain (id %d) at %s, a block every %s\n", *chainID, sim.HTTPEndpoint(), *interval)
	for i, key := range sim.DevKeys() {
		line := fmt.Sprintf("  account %d: %s", i, crypto.PubkeyToAddress(key.PublicKey).Hex())
		if *printKeys {
			line += "  key 0x" + keyHex(key)
		}
		fmt.Println(line)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *sealOnStdin {
		// The input's end (the driver gone) stops the chain like a signal.
		go func() {
			defer stop()
			if err := sealOnCommand(os.Stdin, sim.Commit); err != nil {
				fmt.Fprintln(os.Stderr, "txm-devchain:", err)
			}
		}()
	}
	<-ctx.Done()
	return nil
}

// sealOnCommand seals a block for every "seal" line of in until it ends; any other line is
// an error, so a driver's typo is not taken for a block that never comes.
func sealOnCommand(in io.Reader, seal func() common.Hash) error {
	lines := bufio.NewScanner(in)
	for lines.Scan() {
		switch command := strings.TrimSpace(lines.Text()); command {
		case "seal":
			seal()
		case "":
		default:
			return fmt.Errorf("-seal-on-stdin: unknown command %q (only \"seal\")", command)
		}
	}
	return lines.Err()
}
