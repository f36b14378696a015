package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// txmctlBinary builds client/cmd/txmctl once per test binary: its exit codes are part of
// what is tested, so it runs as the program users run.
var txmctlBuild struct {
	once sync.Once
	path string
	err  error
}

func txmctlBinary(t *testing.T) string {
	t.Helper()
	txmctlBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "txmctl-test-")
		if err != nil {
			txmctlBuild.err = err
			return
		}
		txmctlBuild.path = filepath.Join(dir, "txmctl")
		out, err := exec.Command("go", "build", "-o", txmctlBuild.path, "github.com/bionicotaku/txmanager-service/client/cmd/txmctl").CombinedOutput()
		if err != nil {
			txmctlBuild.err = errors.New(string(out))
		}
	})
	if txmctlBuild.err != nil {
		t.Fatalf("go build txmctl: %v", txmctlBuild.err)
	}
	return txmctlBuild.path
}

// txmctlRun is one run of txmctl: its exit code and outputs.
type txmctlRun struct {
	code           int
	stdout, stderr string
}

type txmctlTarget struct {
	bin, addr string
}

// run runs txmctl against the service with key (none when empty) and the arguments.
func (c txmctlTarget) run(t *testing.T, key string, args ...string) txmctlRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, append([]string{"--addr", c.addr}, args...)...)
	cmd.Env = append(os.Environ(), "TXMCTL_API_KEY="+key, "TXMCTL_ADDR=", "TXMCTL_TOKEN=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	run := txmctlRun{stdout: stdout.String(), stderr: stderr.String()}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		run.code = exit.ExitCode()
	case err != nil:
		t.Fatalf("txmctl %v: %v", args, err)
	}
	return run
}

// expect runs txmctl and requires the exit code.
func (c txmctlTarget) expect(t *testing.T, code int, key string, args ...string) txmctlRun {
	t.Helper()
	r := c.run(t, key, args...)
	if r.code != code {
		t.Fatalf("txmctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	return r
}

// decodeJSON reads txmctl --json output (one message) into m.
func decodeJSON(t *testing.T, out string, m proto.Message) {
	t.Helper()
	if err := protojson.Unmarshal([]byte(out), m); err != nil {
		t.Fatalf("txmctl --json printed %q: %v", out, err)
	}
}

// decodeJSONList reads txmctl --json output (an array) into messages made by fresh.
func decodeJSONList[M proto.Message](t *testing.T, out string, fresh func() M) []M {
	t.Helper()
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raws); err != nil {
		t.Fatalf("txmctl --json printed %q: %v", out, err)
	}
	list := make([]M, len(raws))
	for i, raw := range raws {
		list[i] = fresh()
		if err := protojson.Unmarshal(raw, list[i]); err != nil {
			t.Fatalf("txmctl --json item %s: %v", raw, err)
		}
	}
	return list
}

// txmctl against a real service with authentication on: every subcommand, its tables,
// its --json and its exit codes.
func TestTxmctl(t *testing.T) {
	t.Parallel()
	adminKey, callerKey := "txmctl-admin-key", "txmctl-caller-key"
	// A keystore for the roster commands: one key at start, one added at run time.
	keyDir, passFile := t.TempDir(), filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passFile, []byte("txmctl"), 0o600); err != nil {
		t.Fatal(err)
	}
	startKey, addedKey := newSignerKey(t), newSignerKey(t)
	writeKeystoreFile(t, keyDir, "txmctl", startKey)
	s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.Keystore = conf.KeystoreSource{Dir: keyDir, Addresses: []string{crypto.PubkeyToAddress(startKey.PublicKey).Hex()}, PassphraseFile: passFile}
		bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{
			{ID: "operator", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true},
			{ID: "caller", SHA256: sha256Hex(callerKey), Signers: []string{"*"}},
		}}
		// The reverting create below must be admitted to end FAILED_FINAL.
		bc.Create.SimulateCalls = false
	}})
	ctl := txmctlTarget{bin: txmctlBinary(t), addr: s.grpcAddr}
	signer, to := devAddress(t, 0), devAddress(t, 5)
	create := func(t *testing.T, body map[string]any) string {
		t.Helper()
		a := s.doAs(t, http.MethodPost, "/api/v1/tx", mustJSON(t, body), "X-API-Key", callerKey)
		if a.status != http.StatusAccepted {
			t.Fatalf("create: %d %s", a.status, a.raw)
		}
		return a.tx()["txId"].(string)
	}
	confirmedID := create(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000, "requestId": "ctl-1"})

	t.Run("tx wait", func(t *testing.T) {
		r := ctl.expect(t, 0, callerKey, "tx", "wait", confirmedID)
		if !strings.Contains(r.stdout, "CONFIRMED") {
			t.Fatalf("tx wait printed %q, want the CONFIRMED transaction", r.stdout)
		}
		r = ctl.expect(t, 0, callerKey, "--json", "tx", "wait", "--signer", signer, "--request-id", "ctl-1")
		var tx v1.Tx
		decodeJSON(t, r.stdout, &tx)
		if tx.GetTxId() != confirmedID || tx.GetState() != "CONFIRMED" {
			t.Fatalf("tx wait by request: %v", &tx)
		}
		reverting := create(t, map[string]any{"signer": devAddress(t, 4), "data": "0x60006000fd", "gasLimit": 100000, "requestId": "ctl-revert"})
		if r := ctl.expect(t, 8, callerKey, "tx", "wait", reverting); !strings.Contains(r.stdout, "FAILED_FINAL") {
			t.Fatalf("tx wait on a reverting transaction printed %q", r.stdout)
		}
		unmined := create(t, map[string]any{"signer": devAddress(t, 2), "to": to, "value": "1", "gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1", "requestId": "ctl-unmined"})
		ctl.expect(t, 7, callerKey, "--timeout", "1s", "tx", "wait", unmined)
		ctl.expect(t, 2, callerKey, "tx", "wait")
	})
	t.Run("tx get", func(t *testing.T) {
		r := ctl.expect(t, 0, callerKey, "--json", "tx", "get", confirmedID)
		var tx v1.Tx
		decodeJSON(t, r.stdout, &tx)
		if tx.GetTxId() != confirmedID || tx.GetReceipt() == nil {
			t.Fatalf("tx get: %v", &tx)
		}
		if r := ctl.expect(t, 0, callerKey, "tx", "get", confirmedID); !strings.Contains(r.stdout, "tx hash:") || !strings.Contains(r.stdout, tx.GetTxHash()) {
			t.Fatalf("tx get table: %q", r.stdout)
		}
		ctl.expect(t, 3, callerKey, "tx", "get", "00000000-0000-7000-8000-000000000000")
		ctl.expect(t, 5, "", "tx", "get", confirmedID)
	})
	t.Run("tx by-request", func(t *testing.T) {
		r := ctl.expect(t, 0, callerKey, "--json", "tx", "by-request", "--signer", signer, "--request-id", "ctl-1")
		var tx v1.Tx
		decodeJSON(t, r.stdout, &tx)
		if tx.GetTxId() != confirmedID {
			t.Fatalf("tx by-request: %v", &tx)
		}
		ctl.expect(t, 2, callerKey, "tx", "by-request", "--signer", signer)
		ctl.expect(t, 4, callerKey, "tx", "by-request", "--signer", "not-an-address", "--request-id", "x")
	})
	t.Run("feed tail", func(t *testing.T) {
		r := ctl.expect(t, 0, callerKey, "--json", "feed", "tail", "--from-start", "--count", "1")
		var first v1.Completion
		decodeJSON(t, strings.TrimSpace(r.stdout), &first)
		if first.GetCursor() == "" || first.GetTxId() == "" {
			t.Fatalf("feed tail --from-start: %v", &first)
		}
		// From now on: a tail started before a create prints that create's completion.
		tail := exec.Command(ctl.bin, "--addr", ctl.addr, "--api-key", callerKey, "feed", "tail", "--count", "1")
		var out bytes.Buffer
		tail.Stdout, tail.Stderr = &out, &out
		if err := tail.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the tail reaches the end of the feed first
		id := create(t, map[string]any{"signer": signer, "to": to, "value": "2", "gasLimit": 21000, "requestId": "ctl-tail"})
		done := make(chan error, 1)
		go func() { done <- tail.Wait() }()
		select {
		case err := <-done:
			if err != nil || !strings.Contains(out.String(), id) {
				t.Fatalf("feed tail: %v, printed %q, want the completion of %s", err, out.String(), id)
			}
		case <-time.After(time.Minute):
			_ = tail.Process.Kill()
			t.Fatalf("feed tail printed %q and did not stop after one completion", out.String())
		}
		lines := bufio.NewScanner(strings.NewReader(out.String()))
		if !lines.Scan() || !strings.HasPrefix(lines.Text(), "CURSOR") {
			t.Fatalf("feed tail table has no header: %q", out.String())
		}
		ctl.expect(t, 2, callerKey, "feed", "tail", "--from-start", "--after", first.GetCursor())
	})
	t.Run("signers", func(t *testing.T) {
		r := ctl.expect(t, 0, adminKey, "--json", "signers")
		signers := decodeJSONList(t, r.stdout, func() *v1.SignerStatus { return new(v1.SignerStatus) })
		var found *v1.SignerStatus
		for _, st := range signers {
			if st.GetSigner() == signer {
				found = st
			}
		}
		if found == nil || found.GetNextNonce() == 0 || found.GetChainId() != chain.SimulatedChainID {
			t.Fatalf("signers: %v, want %s with its nonces", signers, signer)
		}
		if r := ctl.expect(t, 0, adminKey, "signers"); !strings.Contains(r.stdout, "CONDITION") || !strings.Contains(r.stdout, "serving") || !strings.Contains(r.stdout, signer) {
			t.Fatalf("signers table: %q", r.stdout)
		}
		ctl.expect(t, 5, callerKey, "signers")
		r = ctl.expect(t, 0, adminKey, "--json", "signers", "status", signer)
		var one v1.SignerStatus
		decodeJSON(t, r.stdout, &one)
		if one.GetSigner() != signer || one.GetNextNonce() != found.GetNextNonce() {
			t.Fatalf("signers status: %v, want what signers listed: %v", &one, found)
		}
	})
	t.Run("stuck", func(t *testing.T) {
		unmined := create(t, map[string]any{"signer": devAddress(t, 3), "to": to, "value": "1", "gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1", "requestId": "ctl-stuck"})
		waitFor(t, time.Minute, "the unmined transaction broadcast", func() bool { return s.tx(t, unmined).state == "TRACKING" })
		ctl.expect(t, 2, adminKey, "stuck", "resolve", unmined)
		r := ctl.expect(t, 0, adminKey, "stuck", "resolve", unmined, "--action", "NOOP", "--reason", "txmctl test")
		if !strings.Contains(r.stdout, "resolved with NOOP") || !strings.Contains(r.stdout, "STUCK") {
			t.Fatalf("stuck resolve printed %q", r.stdout)
		}
		ctl.expect(t, 3, adminKey, "stuck", "resolve", "00000000-0000-7000-8000-000000000000", "--reason", "none")
		r = ctl.expect(t, 0, adminKey, "--json", "stuck", "list", "--signer", devAddress(t, 3))
		stuck := decodeJSONList(t, r.stdout, func() *v1.Tx { return new(v1.Tx) })
		if len(stuck) != 1 || stuck[0].GetTxId() != unmined {
			t.Fatalf("stuck list: %v, want %s", stuck, unmined)
		}
		if r := ctl.expect(t, 0, adminKey, "stuck", "list"); !strings.Contains(r.stdout, unmined) {
			t.Fatalf("stuck list table: %q", r.stdout)
		}
		ctl.expect(t, 4, adminKey, "stuck", "list", "--limit", "5000")
	})
	t.Run("quarantine", func(t *testing.T) {
		if r := ctl.expect(t, 0, adminKey, "quarantine", "list"); !strings.Contains(r.stdout, "no signer is quarantined") {
			t.Fatalf("quarantine list with none: %q", r.stdout)
		}
		// A quarantine as a failover leaves it: the chain two nonces ahead of the database.
		held := devAddress(t, 6)
		if _, err := s.pool.Exec(context.Background(), `INSERT INTO signer_quarantine (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token)
			VALUES ($1, $2, 0, 2, 'txmctl-test', 1)`, chain.SimulatedChainID, held); err != nil {
			t.Fatal(err)
		}
		r := ctl.expect(t, 0, adminKey, "--json", "quarantine", "list")
		listed := decodeJSONList(t, r.stdout, func() *v1.Quarantine { return new(v1.Quarantine) })
		api := s.doAs(t, http.MethodGet, "/api/v1/admin/signers/"+held+"/quarantine", nil, "X-API-Key", adminKey)
		var shown v1.Quarantine
		decodeJSON(t, api.raw, &shown)
		if api.status != http.StatusOK || len(listed) != 1 || !proto.Equal(listed[0], &shown) || len(shown.GetRanges()) != 1 || shown.GetRanges()[0].GetCount() != 2 {
			t.Fatalf("txmctl quarantine list shows %v\nthe admin API shows %d %s", listed, api.status, api.raw)
		}
		// The nonces themselves come on request (a large loss lists millions).
		withNonces := s.doAs(t, http.MethodGet, "/api/v1/admin/signers/"+held+"/quarantine?nonces=true", nil, "X-API-Key", adminKey)
		var detailed v1.Quarantine
		decodeJSON(t, withNonces.raw, &detailed)
		if withNonces.status != http.StatusOK || len(detailed.GetUnknownNonces()) != 2 {
			t.Fatalf("quarantine with its nonces: %d %s", withNonces.status, withNonces.raw)
		}
		if r := ctl.expect(t, 0, adminKey, "quarantine", "list"); !strings.Contains(r.stdout, held) || !strings.Contains(r.stdout, "QUARANTINED") {
			t.Fatalf("quarantine list table: %q", r.stdout)
		}
		ctl.expect(t, 2, adminKey, "quarantine", "release", held)
		ctl.expect(t, 5, callerKey, "quarantine", "release", held, "--note", "not mine to release")
		if r := ctl.expect(t, 0, adminKey, "quarantine", "release", held, "--note", "both nonces are ours"); !strings.Contains(r.stdout, "not quarantined") {
			t.Fatalf("quarantine release printed %q", r.stdout)
		}
		ctl.expect(t, 3, adminKey, "quarantine", "release", held, "--note", "again")
		if r := ctl.expect(t, 0, adminKey, "quarantine", "list"); !strings.Contains(r.stdout, "no signer is quarantined") {
			t.Fatalf("quarantine list after the release: %q", r.stdout)
		}
	})
	t.Run("signers roster", func(t *testing.T) {
		added := crypto.PubkeyToAddress(addedKey.PublicKey).Hex()
		writeKeystoreFile(t, keyDir, "txmctl", addedKey)
		ctl.expect(t, 5, callerKey, "signers", "add", added, "--source", "keystore")
		ctl.expect(t, 4, adminKey, "signers", "add", added, "--source", "vault")
		ctl.expect(t, 2, adminKey, "signers", "add", added)
		if r := ctl.expect(t, 0, adminKey, "signers", "add", added, "--source", "keystore", "--note", "new hot wallet"); !strings.Contains(r.stdout, "active") {
			t.Fatalf("signers add printed %q", r.stdout)
		}
		r := ctl.expect(t, 0, adminKey, "--json", "signers", "roster")
		roster := decodeJSONList(t, r.stdout, func() *v1.RosterSigner { return new(v1.RosterSigner) })
		found := false
		for _, rs := range roster {
			found = found || (rs.GetSigner() == added && rs.GetState() == "active" && rs.GetSource() == "keystore")
		}
		if !found {
			t.Fatalf("roster %v lacks the added signer, active from the keystore", roster)
		}
		ctl.expect(t, 2, adminKey, "signers", "retire", added)
		r = ctl.expect(t, 0, adminKey, "--json", "signers", "retire", added, "--note", "rotation")
		var retired v1.RosterSigner
		decodeJSON(t, r.stdout, &retired)
		if retired.GetState() != "retired" || retired.GetNote() != "rotation" {
			t.Fatalf("signers retire of a signer with nothing unfinished: %v, want retired", &retired)
		}
		if r := ctl.expect(t, 0, adminKey, "signers", "roster"); !strings.Contains(r.stdout, "retired") {
			t.Fatalf("roster table: %q", r.stdout)
		}
	})
	t.Run("nodes", func(t *testing.T) {
		r := ctl.expect(t, 0, adminKey, "--json", "nodes")
		nodes := decodeJSONList(t, r.stdout, func() *v1.Node { return new(v1.Node) })
		if len(nodes) != 1 || nodes[0].GetNodeId() != s.nodeID || !nodes[0].GetAlive() {
			t.Fatalf("nodes: %v, want %s alive", nodes, s.nodeID)
		}
		if r := ctl.expect(t, 0, adminKey, "nodes"); !strings.Contains(r.stdout, s.nodeID) {
			t.Fatalf("nodes table: %q", r.stdout)
		}
		ctl.expect(t, 5, "", "nodes")
	})
	t.Run("unreachable", func(t *testing.T) {
		down := txmctlTarget{bin: ctl.bin, addr: "127.0.0.1:1"}
		down.expect(t, 6, adminKey, "--timeout", "5s", "nodes")
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}
