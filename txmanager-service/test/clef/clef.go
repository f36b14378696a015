// Package clef runs a real clef, go-ethereum's external signer, for tests and the chaos
// suite: built at a pinned version (for the tests by `make test-binaries`, which they only
// look for; the chaos suite builds its own as it starts), holding the keys it is given in
// an encrypted keystore, approving signing for exactly those accounts through an attested
// rules file, and serving account_list and account_signTransaction over HTTP on loopback.
//
// Clef is interactive by design: it asks for passwords on its terminal and for approval of
// every request. Run headless, it works like this (all of it found by running it):
//
//  1. `clef --suppress-bootwarn --configdir C init` reads the master seed's password twice
//     from standard input (when stdin is not a terminal clef reads plain lines) and writes
//     the encrypted master seed C/masterseed.json.
//  2. `clef --suppress-bootwarn --configdir C --keystore K setpw ADDR` reads the account's
//     password twice, then the master password, and stores the account password in the
//     vault the master seed encrypts: the rules engine signs with it, nobody types it.
//  3. `clef --suppress-bootwarn --configdir C attest SHA256` (master password on stdin)
//     records the rules file's hash; clef runs only an attested rules file.
//  4. `clef --suppress-bootwarn --rules rules.js --http --http.port 0 ...` reads the master
//     password from stdin once at start; the rules file approves account_list and
//     account_signTransaction from the configured accounts and rejects everything else,
//     so no request ever waits for a human. With port 0 clef logs the address it bound
//     ("HTTP endpoint opened url=http://127.0.0.1:PORT/").
//
// Passwords are random per run and live only in this process and clef's stdin.
package clef

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// ModuleVersion is the go-ethereum release clef is built from. go-ethereum removed
// cmd/clef in v1.17.4 (it moved to github.com/ethereum/clef, which the Go module proxy
// reachable here refuses), so this is the last release that has it, not the geth
// version the suite runs (e2e.GethModuleVersion, v1.17.8). Clef's external API
// (account_list, account_signTransaction) is the same in both.
const ModuleVersion = "v1.17.3"

const clefPackage = "github.com/ethereum/go-ethereum/cmd/clef"

// Build installs clef ModuleVersion into binDir (once; later calls find it there), for the
// chaos suite; tests use FindInRepo.
func Build(ctx context.Context, binDir string) (string, error) {
	return e2e.InstallGoTool(ctx, binDir, clefPackage, ModuleVersion)
}

// FindInRepo is clef ModuleVersion as `make test-binaries` built it into the monorepo's
// bin/testbin (found from the working directory); when it is not there the error names
// the target. It installs nothing.
func FindInRepo() (string, error) {
	return e2e.FindTestBinary(clefPackage, ModuleVersion)
}

// Options describes one clef.
type Options struct {
	Bin string
	// Dir holds clef's configuration, keystore, rules and log; empty means a temporary
	// folder that Stop removes.
	Dir     string
	ChainID *big.Int
	// Keys are the accounts clef holds and signs for.
	Keys []*ecdsa.PrivateKey
	// Refused are accounts among Keys that clef lists but whose signing requests the rules
	// reject, as an operator's rules reject an account they do not approve.
	Refused []common.Address
	// RefusedNonce, with RefusedUntil set, makes the rules reject signing that nonce (for
	// any account) until that time: one signature in the middle of a run that fails, then
	// works again, as a KMS or clef that refuses one request does.
	RefusedNonce uint64
	RefusedUntil time.Time
	// MaxValue, when set, makes the rules reject any transaction sending more wei, for good,
	// as an operator's spending limit in clef's rules does.
	MaxValue *big.Int
}

// Clef is a running clef this process started.
type Clef struct {
	proc     *e2e.Process
	url      string
	dir      string
	ownsDir  bool
	accounts []common.Address
}

// httpOpened matches clef's line once its HTTP server is bound:
// `INFO [..] HTTP endpoint opened  url=http://127.0.0.1:43121/`.
var httpOpened = regexp.MustCompile(`HTTP endpoint opened\s+url=(http://[^/\s]+)/`)

// Start prepares clef's master seed, keystore, stored passwords and attested rules, then
// starts it and waits until it serves. ctx bounds the whole.
func Start(ctx context.Context, opts Options) (*Clef, error) {
	if opts.ChainID == nil || opts.ChainID.Sign() <= 0 || len(opts.Keys) == 0 {
		return nil, fmt.Errorf("clef: a chain id and at least one key are needed")
	}
	dir, owned := opts.Dir, opts.Dir == ""
	if owned {
		var err error
		if dir, err = os.MkdirTemp("", "txm-clef-"); err != nil {
			return nil, fmt.Errorf("clef: %w", err)
		}
	}
	c := &Clef{dir: dir, ownsDir: owned}
	if err := c.prepare(ctx, opts); err != nil {
		c.removeDir()
		return nil, err
	}
	return c, nil
}

func (c *Clef) prepare(ctx context.Context, opts Options) error {
	configDir, keystoreDir := filepath.Join(c.dir, "config"), filepath.Join(c.dir, "keystore")
	if err := os.MkdirAll(keystoreDir, 0o700); err != nil {
		return fmt.Errorf("clef: %w", err)
	}
	master, err := password()
	if err != nil {
		return err
	}
	global := []string{"--suppress-bootwarn", "--configdir", configDir, "--keystore", keystoreDir, "--lightkdf", "--nousb"}
	if err := c.run(ctx, opts.Bin, master+"\n"+master+"\n", append(global, "init")...); err != nil {
		return err
	}
	for _, key := range opts.Keys {
		addr := crypto.PubkeyToAddress(key.PublicKey)
		accountPassword, err := password()
		if err != nil {
			return err
		}
		if err := writeKeyFile(keystoreDir, key, accountPassword); err != nil {
			return err
		}
		stdin := accountPassword + "\n" + accountPassword + "\n" + master + "\n"
		if err := c.run(ctx, opts.Bin, stdin, append(global, "setpw", addr.Hex())...); err != nil {
			return err
		}
		c.accounts = append(c.accounts, addr)
	}
	var approved []common.Address
	for _, addr := range c.accounts {
		if !slices.Contains(opts.Refused, addr) {
			approved = append(approved, addr)
		}
	}
	rules := rulesFile(approved, opts.RefusedNonce, opts.RefusedUntil, opts.MaxValue)
	rulesPath := filepath.Join(c.dir, "rules.js")
	if err := os.WriteFile(rulesPath, []byte(rules), 0o600); err != nil {
		return fmt.Errorf("clef: %w", err)
	}
	sum := sha256.Sum256([]byte(rules))
	if err := c.run(ctx, opts.Bin, master+"\n", append(global, "attest", hex.EncodeToString(sum[:]))...); err != nil {
		return err
	}
	args := append(global,
		"--chainid", opts.ChainID.String(),
		"--rules", rulesPath,
		"--auditlog", filepath.Join(c.dir, "audit.log"),
		"--4bytedb-custom", filepath.Join(c.dir, "4byte-custom.json"),
		"--ipcdisable",
		"--http", "--http.addr", "127.0.0.1", "--http.port", "0",
	)
	c.proc, err = e2e.StartProcess(ctx, e2e.ProcessOptions{
		Name: "clef", Bin: opts.Bin, Args: args, Env: os.Environ(), LogPath: filepath.Join(c.dir, "clef.log"),
		Stdin: strings.NewReader(master + "\n"), Announce: httpOpened,
	})
	if err != nil {
		return err
	}
	c.url = c.proc.Announced()
	// The rules file is loaded only when the master seed opened and the hash matched;
	// otherwise clef serves with every request waiting for a human, so check it did.
	if tail := c.proc.LogTail(200); !strings.Contains(tail, "Rule engine configured") {
		_ = c.proc.Stop(5 * time.Second)
		return fmt.Errorf("clef started without its rules file; log tail:\n%s", tail)
	}
	return nil
}

// run runs one clef setup command with stdin as its input.
func (c *Clef) run(ctx context.Context, bin, stdin string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Dir = c.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("clef %s: %w\n%s", args[len(args)-2], err, out)
	}
	return nil
}

// rulesFile approves listing clef's accounts and signing transactions from the approved
// ones, and rejects every other request, so that nothing waits for a human. Until
// refusedUntil (when set), signing refusedNonce is rejected too, and so is a transaction
// above maxValue (when set).
func rulesFile(accounts []common.Address, refusedNonce uint64, refusedUntil time.Time, maxValue *big.Int) string {
	quoted := make([]string, len(accounts))
	for i, a := range accounts {
		quoted[i] = fmt.Sprintf("%q", strings.ToLower(a.Hex()))
	}
	var untilMillis int64
	if !refusedUntil.IsZero() {
		untilMillis = refusedUntil.UnixMilli()
	}
	limit := "null"
	if maxValue != nil {
		limit = strconv.Quote(maxValue.String())
	}
	return `// Written by txmanager-service/test/clef. Attested with clef attest.
var allowed = [` + strings.Join(quoted, ", ") + `];
var refusedNonce = ` + strconv.FormatUint(refusedNonce, 10) + `, refusedUntil = ` + strconv.FormatInt(untilMillis, 10) + `;
var maxValue = ` + limit + `;
function big(v) { var s = String(v); return s.slice(0, 2) === "0x" ? new BigNumber(s.slice(2), 16) : new BigNumber(s); }
function ApproveListing(req) { return "Approve"; }
function ApproveTx(req) {
  var from = String(req.transaction.from).toLowerCase();
  if (Number(req.transaction.nonce) === refusedNonce && Date.now() < refusedUntil) { return "Reject"; }
  if (maxValue !== null && big(req.transaction.value).gt(big(maxValue))) { return "Reject"; }
  return allowed.indexOf(from) >= 0 ? "Approve" : "Reject";
}
function ApproveSignData(req) { return "Reject"; }
function OnSignerStartup(info) {}
function OnApprovedTx(resp) {}
`
}

// writeKeyFile stores key in dir as go-ethereum's keystore does (light scrypt: clef
// decrypts the key for every signature).
func writeKeyFile(dir string, key *ecdsa.PrivateKey, password string) error {
	addr := crypto.PubkeyToAddress(key.PublicKey)
	id, err := uuid.NewRandom()
	if err != nil {
		return fmt.Errorf("clef: key id: %w", err)
	}
	encrypted, err := keystore.EncryptKey(&keystore.Key{Id: id, Address: addr, PrivateKey: key}, password, keystore.LightScryptN, keystore.LightScryptP)
	if err != nil {
		return fmt.Errorf("clef: encrypt key for %s: %w", addr.Hex(), err)
	}
	name := fmt.Sprintf("UTC--%s--%s", time.Now().UTC().Format("2006-01-02T15-04-05.000000000Z"), hex.EncodeToString(addr[:]))
	if err := os.WriteFile(filepath.Join(dir, name), encrypted, 0o600); err != nil {
		return fmt.Errorf("clef: %w", err)
	}
	return nil
}

// password is a fresh random password (clef wants at least 10 characters).
func password() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("clef: password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// URL is clef's HTTP JSON-RPC endpoint.
func (c *Clef) URL() string { return c.url }

// Accounts are the accounts clef signs for, in the order of Options.Keys.
func (c *Clef) Accounts() []common.Address { return c.accounts }

// LogTail is the last lines of clef's log, for error messages.
func (c *Clef) LogTail(lines int) string { return c.proc.LogTail(lines) }

// Stop interrupts clef (it exits on SIGINT), waits for it and removes an owned folder.
// clef opens its HTTP endpoint, which Start waits for, before it installs its interrupt
// handler (cmd/clef: the rules' OnSignerStartup runs in between), so an interrupt soon after
// Start ends it by the signal itself rather than through its handler: stopped all the same.
func (c *Clef) Stop() error {
	err := c.proc.Interrupt(10 * time.Second)
	c.removeDir()
	if endedBySignal(err, syscall.SIGINT) {
		return nil
	}
	return err
}

// endedBySignal reports whether err is a process's exit by sig.
func endedBySignal(err error, sig syscall.Signal) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	status, ok := exit.Sys().(syscall.WaitStatus)
	return ok && status.Signaled() && status.Signal() == sig
}

func (c *Clef) removeDir() {
	if c.ownsDir {
		_ = os.RemoveAll(c.dir)
	}
}
