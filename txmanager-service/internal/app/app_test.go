package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// testConfig is the embedded defaults on dsn, loopback ports the kernel picks, and
// pipeline intervals short enough that a transaction is final within seconds.
func testConfig(t *testing.T, dsn string) *conf.Bootstrap {
	t.Helper()
	bc, err := conf.Load("")
	if err != nil {
		t.Fatal(err)
	}
	bc.Database.DSN = dsn
	bc.Database.MigrateOnStart = false
	bc.Server.HTTP.Addr = "127.0.0.1:0"
	bc.Server.GRPC.Addr = "127.0.0.1:0"
	bc.Chain.Embedded.BlockInterval = conf.Duration(200 * time.Millisecond)
	fast := conf.Duration(100 * time.Millisecond)
	bc.Pipeline.SubmitInterval, bc.Pipeline.FinalityInterval, bc.Pipeline.AdoptInterval = fast, fast, fast
	bc.Pipeline.Receipts.PollInterval, bc.Resubmit.ScanInterval, bc.Stuck.ScanInterval = fast, fast, fast
	return bc
}

// testLogger keeps the node's logs out of the test output unless -v asks for them.
func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// assemble binds bc's ports and builds a node with app.New, as main does.
func assemble(t *testing.T, bc *conf.Bootstrap) (run func() error, stop func() error, cleanup func(), err error) {
	t.Helper()
	listeners, err := app.Listen(bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listeners.Close() })
	bc.Node.ID = "app-test-" + bc.Server.GRPC.Addr
	node, cleanup, err := app.New(bc, listeners, testLogger(), services.BuildVersion("test"))
	if err != nil {
		return nil, nil, nil, err
	}
	return node.Run, node.Stop, cleanup, nil
}

// node is one running process assembled by app.New.
type node struct {
	id      string
	httpURL string
	pool    *pgxpool.Pool
	// stop shuts the node down as SIGTERM would and waits for it; later calls do nothing.
	stop func(t *testing.T)
}

func startNode(t *testing.T, dsn string, configure func(*conf.Bootstrap)) *node {
	t.Helper()
	bc := testConfig(t, dsn)
	if configure != nil {
		configure(bc)
	}
	run, stopApp, cleanup, err := assemble(t, bc)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- run() }()
	var once sync.Once
	n := &node{id: bc.Node.ID, httpURL: "http://" + bc.Server.HTTP.Addr, pool: pgtest.NewPool(t, dsn)}
	n.stop = func(t *testing.T) {
		once.Do(func() {
			if err := stopApp(); err != nil {
				t.Errorf("stop: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			cleanup()
		})
	}
	t.Cleanup(func() { n.stop(t) })
	waitFor(t, 30*time.Second, "the node to become ready", func() bool { return n.get(t, "/readyz").status == http.StatusOK })
	return n
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func (n *node) do(t *testing.T, method, path string, payload any) answer {
	t.Helper()
	var body io.Reader
	if payload != nil {
		raw, err := json.Marshal(payload)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, n.httpURL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{raw: err.Error()}
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, raw: string(raw)}
	_ = json.Unmarshal(raw, &a.body)
	return a
}

func (n *node) get(t *testing.T, path string) answer { return n.do(t, http.MethodGet, path, nil) }

// field reads a string at a path of nested objects of a's body ("" when absent).
func (a answer) field(path ...string) string {
	var v any = a.body
	for _, key := range path {
		m, _ := v.(map[string]any)
		v = m[key]
	}
	s, _ := v.(string)
	return s
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// devAddress is the embedded chains' i-th funded development account.
func devAddress(t *testing.T, i int) string {
	t.Helper()
	key, err := chain.DevKey(i)
	if err != nil {
		t.Fatal(err)
	}
	return crypto.PubkeyToAddress(key.PublicKey).Hex()
}

// servedChain is a simulated chain of id chainID served over HTTP on a loopback port, with
// two funded development accounts, closed when the test ends.
func servedChain(t *testing.T, chainID uint64) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{ChainID: chainID, BlockInterval: 200 * time.Millisecond, DevAccounts: 2, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// withRawKey gives bc a signer of its own: without the embedded chain there are no
// development keys, and a node without a key source is refused before it dials anything.
func withRawKey(t *testing.T, bc *conf.Bootstrap) {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	bc.Signers.RawKeys = []string{hexutil.Encode(crypto.FromECDSA(key))}
}

// A node assembled as main assembles it serves a create on its embedded chain through
// every stage to CONFIRMED, and its shutdown runs in the order that loses nothing: it
// leaves the node registry (peers stop forwarding to it) and lets its leases go (a peer
// takes the signer over at once instead of after expiry).
func TestAssembledNodeConfirmsACreateAndLeavesCleanly(t *testing.T) {
	t.Parallel()
	n := startNode(t, testsupport.MigratedDSN(t), nil)
	signer := devAddress(t, 0)
	created := n.do(t, http.MethodPost, "/api/v1/tx", map[string]any{"signer": signer, "to": devAddress(t, 1), "value": "1", "gasLimit": 21000, "requestId": "app-1"})
	if created.status != http.StatusAccepted {
		t.Fatalf("create: %d %s, want 202", created.status, created.raw)
	}
	id := created.field("tx", "txId")
	waitFor(t, 30*time.Second, "the create to be CONFIRMED", func() bool { return n.get(t, "/api/v1/tx/"+id).field("state") == "CONFIRMED" })
	// The feed is positioned by the node's own loops: the completion is served.
	if page := n.get(t, "/api/v1/tx/completions"); !strings.Contains(page.raw, id) {
		t.Fatalf("completions feed %d %s does not carry %s", page.status, page.raw, id)
	}

	n.stop(t)
	var stopped, leaseLive bool
	if err := n.pool.QueryRow(t.Context(), "SELECT stopped_at IS NOT NULL FROM node_registry WHERE node_id = $1", n.id).Scan(&stopped); err != nil || !stopped {
		t.Fatalf("node registry after shutdown: stopped=%t err=%v, want stopped", stopped, err)
	}
	if err := n.pool.QueryRow(t.Context(), "SELECT expires_at > now() FROM signer_lease WHERE signer = $1", signer).Scan(&leaseLive); err != nil || leaseLive {
		t.Fatalf("signer lease after shutdown: live=%t err=%v, want released", leaseLive, err)
	}
}

// What cannot serve is refused when the node is assembled, before it serves anything, with
// an error naming what to change; everything started on the way (the embedded chain, the
// pool) is closed again.
func TestAssemblyRefusesAConfigurationItCannotServe(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		configure func(t *testing.T, bc *conf.Bootstrap)
		want      string
	}{
		{"a fee cap that is not a number", func(_ *testing.T, bc *conf.Bootstrap) { bc.Fees.MaxFeePerGas = "plenty" }, "fees.maxFeePerGas"},
		{"a tip cap that is not a number", func(_ *testing.T, bc *conf.Bootstrap) { bc.Fees.MaxPriorityFeePerGas = "some" }, "fees.maxPriorityFeePerGas"},
		{"a stuck action nobody knows", func(_ *testing.T, bc *conf.Bootstrap) { bc.Stuck.Action = "PRAY" }, "stuck.action"},
		{"one of several chains misconfigured names its chain", func(_ *testing.T, bc *conf.Bootstrap) {
			bc.Chains = []conf.Chain{{ID: 31337, Fees: &conf.Fees{MaxFeePerGas: "plenty"}}}
		}, "chain 31337: fees.maxFeePerGas"},
		{"an endpoint URL of no known scheme", func(t *testing.T, bc *conf.Bootstrap) { withRawKey(t, bc); bc.Chain.RPCURL = "gopher://127.0.0.1:1" }, "chain endpoint"},
		{"an endpoint that refuses connections", func(t *testing.T, bc *conf.Bootstrap) { withRawKey(t, bc); bc.Chain.RPCURL = "http://127.0.0.1:1" }, "no endpoint answered"},
		{"an embedded chain under an id the database knows from an earlier run", func(t *testing.T, bc *conf.Bootstrap) {
			pool := pgtest.NewPool(t, bc.Database.DSN)
			earlier := services.ChainIdentity{ChainID: "1337", GenesisHash: "0x" + strings.Repeat("ab", 32)}
			if err := repositories.NewChainIdentityRepository(pool).Record(t.Context(), earlier); err != nil {
				t.Fatal(err)
			}
		}, "Use a fresh database"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bc := testConfig(t, testsupport.MigratedDSN(t))
			tc.configure(t, bc)
			_, _, cleanup, err := assemble(t, bc)
			if err == nil {
				cleanup()
				t.Fatalf("assembled; want an error naming %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// One chain of several whose endpoint refuses connections at start does not keep the node
// from serving the other: the node is ready with that chain reported unreachable, and once
// the endpoint answers and proves to be the configured chain it serves creates, in the same
// process.
func TestAChainDownAtStartServesOnceItsEndpointAnswers(t *testing.T) {
	t.Parallel()
	late := servedChain(t, 42161)
	proxy, err := faultproxy.Start(late.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	if err := proxy.SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, testsupport.MigratedDSN(t), func(bc *conf.Bootstrap) {
		// The first chain is embedded (no endpoints); the second is reached over JSON-RPC.
		bc.Chains = []conf.Chain{{ID: 31337}, {ID: 42161, RPCURL: proxy.URL()}}
		bc.Chain.Health.ProbeInterval = conf.Duration(200 * time.Millisecond)
	})
	ready := n.get(t, "/readyz")
	if ready.field("checks", "chain_31337") != "ok" || ready.field("checks", "chain_42161") != "unreachable" {
		t.Fatalf("/readyz with one chain down: %d %s, want chain_31337 ok and chain_42161 unreachable", ready.status, ready.raw)
	}
	create := func(chainID uint64) answer {
		return n.do(t, http.MethodPost, "/api/v1/tx", map[string]any{"chainId": chainID, "signer": devAddress(t, 0), "to": devAddress(t, 1), "value": "1",
			"gasLimit": 21000, "requestId": "late-1"})
	}
	if a := create(42161); a.status != http.StatusServiceUnavailable {
		t.Fatalf("create on the unreachable chain: %d %s, want 503", a.status, a.raw)
	}
	if a := create(31337); a.status != http.StatusAccepted {
		t.Fatalf("create on the embedded chain: %d %s, want 202", a.status, a.raw)
	}

	if err := proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the late chain to serve creates", func() bool { return create(42161).status == http.StatusAccepted })
	var rows int
	if err := n.pool.QueryRow(context.Background(), "SELECT count(*) FROM managed_tx WHERE chain_id = 42161").Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("rows on the late chain: %d (%v), want 1", rows, err)
	}
}

// A node whose signers all come from a keystore directory kept for the roster starts with
// no signer and unlocks none of the directory's files: a key file there serves only once an
// operator adds its signer, and then confirms its creates.
func TestANodeOfRosterSignersStartsWithNoneAndServesTheOneAdded(t *testing.T) {
	t.Parallel()
	sim := servedChain(t, 42162)
	// Both funded accounts have a key file in the directory; only one is added.
	dir, passphraseFile := devKeystore(t, 2)
	n := startNode(t, testsupport.MigratedDSN(t), func(bc *conf.Bootstrap) {
		bc.Chains = []conf.Chain{{ID: 42162, RPCURL: sim.HTTPEndpoint()}}
		bc.Signers.Keystore = conf.KeystoreSource{Dir: dir, PassphraseFile: passphraseFile, RosterOnly: true}
	})
	added, other := devAddress(t, 0), devAddress(t, 1)
	create := func(signer, requestID string) answer {
		return n.do(t, http.MethodPost, "/api/v1/tx", map[string]any{"chainId": 42162, "signer": signer, "to": other, "value": "1",
			"gasLimit": 21000, "requestId": requestID})
	}
	if a := create(added, "roster-before"); a.status != http.StatusUnprocessableEntity || a.field("reason") != "UNKNOWN_SIGNER" {
		t.Fatalf("create before the signer was added: %d %s, want 422 UNKNOWN_SIGNER", a.status, a.raw)
	}
	if a := n.do(t, http.MethodPost, "/api/v1/admin/roster", map[string]any{"signer": added, "source": "keystore", "note": "roster-only keystore"}); a.status != http.StatusOK {
		t.Fatalf("add the signer: %d %s, want 200", a.status, a.raw)
	}
	created := create(added, "roster-after")
	if created.status != http.StatusAccepted {
		t.Fatalf("create after the signer was added: %d %s, want 202", created.status, created.raw)
	}
	id := created.field("tx", "txId")
	waitFor(t, 30*time.Second, "the added signer's create to be CONFIRMED", func() bool { return n.get(t, "/api/v1/tx/"+id).field("state") == "CONFIRMED" })
	if a := create(other, "roster-never-added"); a.status != http.StatusUnprocessableEntity || a.field("reason") != "UNKNOWN_SIGNER" {
		t.Fatalf("create for the signer whose file was never added: %d %s, want 422 UNKNOWN_SIGNER", a.status, a.raw)
	}
}

// devKeystore writes the first n funded development accounts' keys as keystore files into a
// directory of their own, and their passphrase into a file.
func devKeystore(t *testing.T, n int) (dir, passphraseFile string) {
	t.Helper()
	dir, passphrase := t.TempDir(), "roster keys 4c1e"
	passphraseFile = filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passphraseFile, []byte(passphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		key, err := chain.DevKey(i)
		if err != nil {
			t.Fatal(err)
		}
		id, err := uuid.NewRandom()
		if err != nil {
			t.Fatal(err)
		}
		sealed, err := keystore.EncryptKey(&keystore.Key{Id: id, Address: crypto.PubkeyToAddress(key.PublicKey), PrivateKey: key}, passphrase,
			keystore.LightScryptN, keystore.LightScryptP)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("key-%d.json", i)), sealed, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, passphraseFile
}

// A keystore directory whose files a node served is kept for the roster from the next start
// (signers.keystore.rosterOnly). The signer it served keeps its roster row of source config
// and goes on being served from its file; a file of the directory no node served, and the
// roster never added, stays locked.
func TestASignerServedFromTheFileGoesOnWhenItsDirectoryIsKeptForTheRoster(t *testing.T) {
	t.Parallel()
	sim := servedChain(t, 42163)
	dir, passphraseFile := devKeystore(t, 2)
	dsn := testsupport.MigratedDSN(t)
	served, other := devAddress(t, 0), devAddress(t, 1)
	create := func(n *node, signer, requestID string) answer {
		return n.do(t, http.MethodPost, "/api/v1/tx", map[string]any{"chainId": 42163, "signer": signer, "to": other, "value": "1",
			"gasLimit": 21000, "requestId": requestID})
	}
	confirmed := func(n *node, signer, requestID string) {
		t.Helper()
		a := create(n, signer, requestID)
		if a.status != http.StatusAccepted {
			t.Fatalf("create %s for %s: %d %s, want 202", requestID, signer, a.status, a.raw)
		}
		id := a.field("tx", "txId")
		waitFor(t, 30*time.Second, requestID+" CONFIRMED", func() bool { return n.get(t, "/api/v1/tx/"+id).field("state") == "CONFIRMED" })
	}
	before := startNode(t, dsn, func(bc *conf.Bootstrap) {
		bc.Chains = []conf.Chain{{ID: 42163, RPCURL: sim.HTTPEndpoint()}}
		bc.Signers.Keystore = conf.KeystoreSource{Dir: dir, PassphraseFile: passphraseFile, Addresses: []string{served}}
	})
	confirmed(before, served, "from-the-file")
	before.stop(t)

	after := startNode(t, dsn, func(bc *conf.Bootstrap) {
		bc.Chains = []conf.Chain{{ID: 42163, RPCURL: sim.HTTPEndpoint()}}
		bc.Signers.Keystore = conf.KeystoreSource{Dir: dir, PassphraseFile: passphraseFile, RosterOnly: true}
	})
	confirmed(after, served, "kept-for-the-roster")
	if a := create(after, other, "never-served"); a.status != http.StatusUnprocessableEntity || a.field("reason") != "UNKNOWN_SIGNER" {
		t.Fatalf("create for the signer no node served and the roster never added: %d %s, want 422 UNKNOWN_SIGNER", a.status, a.raw)
	}
	var source string
	if err := after.pool.QueryRow(context.Background(), "SELECT source FROM signer_roster WHERE signer = $1", served).Scan(&source); err != nil {
		t.Fatal(err)
	}
	if source != "config" {
		t.Fatalf("the served signer's roster row has source %q, want config", source)
	}
}
