package integration

import (
	"context"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// newChainWithID is a test-owned simulated chain under its own chain id, served over HTTP.
func newChainWithID(t testing.TB, id uint64) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{ChainID: id, BlockInterval: 200 * time.Millisecond, DevAccounts: 8, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// One deployment serves two chains with the same keys: each (chain, signer) has its own
// nonces, contiguous from 0; every transaction is mined on the chain it was asked for;
// the same request id on two chains is two transactions; reads, the feed, the admin API and
// the metrics name the chain.
func TestOneKeyOnTwoChains(t *testing.T) {
	t.Parallel()
	const perSigner = 12
	chainA, chainB := newChainWithID(t, 31337), newChainWithID(t, 42161)
	chains := map[uint64]*chain.SimulatedChain{31337: chainA, 42161: chainB}
	s := startService(t, serviceOptions{chain: chainA, signers: 2, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chains = []conf.Chain{{ID: 31337, RPCURL: chainA.HTTPEndpoint()}, {ID: 42161, RPCURL: chainB.HTTPEndpoint(), BlockTime: conf.Duration(200 * time.Millisecond)}}
	}})
	signers := []string{devAddress(t, 0), devAddress(t, 1)}
	to := devAddress(t, 6)

	refusals := []struct {
		name    string
		payload map[string]any
		want    string
	}{
		{"no chain named", map[string]any{"signer": signers[0], "to": to, "value": "1", "gasLimit": 21000}, "required"},
		{"a chain not served", map[string]any{"chainId": 5, "signer": signers[0], "to": to, "value": "1", "gasLimit": 21000}, "not served"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			a := s.create(t, tc.payload)
			msg, _ := a.body["message"].(string)
			if a.status != http.StatusBadRequest || a.reason() != "INVALID_ARGUMENT" || !strings.Contains(msg, tc.want) {
				t.Fatalf("got %d %s, want 400 INVALID_ARGUMENT naming %q", a.status, a.raw, tc.want)
			}
		})
	}
	if n := s.count(t, "SELECT count(*) FROM managed_tx"); n != 0 {
		t.Fatalf("refused creates left %d rows", n)
	}

	type asked struct {
		chainID uint64
		signer  string
		request string
	}
	var requests []asked
	for i := range perSigner {
		for _, signer := range signers {
			for _, id := range []uint64{31337, 42161} {
				requests = append(requests, asked{chainID: id, signer: signer, request: fmt.Sprintf("two-chains-%d", i)})
			}
		}
	}
	answers := createConcurrently(t, s, len(requests), 16, func(i int) map[string]any {
		r := requests[i]
		return map[string]any{"chainId": r.chainID, "signer": r.signer, "to": to, "value": "1", "gasLimit": 21000, "requestId": r.request}
	})
	requireStatus(t, answers, http.StatusAccepted)
	nonces, ids := map[string][]uint64{}, map[string]bool{}
	for i, a := range answers {
		tx, r := a.tx(), requests[i]
		if ids[tx["txId"].(string)] {
			t.Fatalf("two creates answered with tx %s", tx["txId"])
		}
		ids[tx["txId"].(string)] = true
		if got := tx["chainId"]; got != strconv.FormatUint(r.chainID, 10) {
			t.Fatalf("create on chain %d answered chainId %v", r.chainID, got)
		}
		nonce, err := strconv.ParseUint(tx["nonce"].(string), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		lane := fmt.Sprintf("%d/%s", r.chainID, r.signer)
		nonces[lane] = append(nonces[lane], nonce)
	}
	for lane, got := range nonces {
		t.Run("nonces "+lane, func(t *testing.T) { requireContiguousNonces(t, got) })
	}

	// Every transaction is mined, on the chain it was asked for: read back from that chain
	// and recovered with that chain's id, and unknown on the other one.
	for i, a := range answers {
		id := a.tx()["txId"].(string)
		waitFor(t, time.Minute, "tx "+id+" CONFIRMED", func() bool { return s.tx(t, id).state == "CONFIRMED" })
		r := requests[i]
		hash := common.HexToHash(s.tx(t, id).txHash)
		onChain, other := ethClient(t, chains[r.chainID]), ethClient(t, chains[otherChain(r.chainID)])
		mined, _, err := onChain.TransactionByHash(t.Context(), hash)
		if err != nil {
			t.Fatalf("tx %s (%s) not on chain %d: %v", id, hash, r.chainID, err)
		}
		from, err := types.Sender(types.LatestSignerForChainID(new(big.Int).SetUint64(r.chainID)), mined)
		if err != nil || !strings.EqualFold(from.Hex(), r.signer) || mined.ChainId().Uint64() != r.chainID {
			t.Fatalf("tx %s on chain %d: from %s (%v), chain id %s; asked %s on %d", id, r.chainID, from, err, mined.ChainId(), r.signer, r.chainID)
		}
		if _, _, err := other.TransactionByHash(t.Context(), hash); err == nil {
			t.Fatalf("tx %s asked for chain %d is also on chain %d", id, r.chainID, otherChain(r.chainID))
		}
	}
	for _, id := range []uint64{31337, 42161} {
		for _, signer := range signers {
			count, err := ethClient(t, chains[id]).NonceAt(t.Context(), common.HexToAddress(signer), nil)
			if err != nil || count != perSigner {
				t.Errorf("chain %d signer %s: %d transactions mined (%v), want %d", id, signer, count, err, perSigner)
			}
		}
	}

	t.Run("read by request id on each chain", func(t *testing.T) {
		byChain := map[string]bool{}
		for _, id := range []uint64{31337, 42161} {
			a := s.do(t, http.MethodGet, fmt.Sprintf("/api/v1/tx/by-request?chainId=%d&signer=%s&requestId=two-chains-0", id, signers[0]), nil)
			if a.status != http.StatusOK || a.body["chainId"] != strconv.FormatUint(id, 10) {
				t.Fatalf("chain %d: %d %s", id, a.status, a.raw)
			}
			byChain[a.body["txId"].(string)] = true
		}
		if len(byChain) != 2 {
			t.Fatalf("one request id on two chains read back as %d transactions", len(byChain))
		}
		if a := s.do(t, http.MethodGet, "/api/v1/tx/by-request?signer="+signers[0]+"&requestId=two-chains-0", nil); a.status != http.StatusBadRequest {
			t.Fatalf("by-request without chainId: %d %s, want 400", a.status, a.raw)
		}
	})

	t.Run("feed entries name their chain and filter by it", func(t *testing.T) {
		for _, id := range []uint64{31337, 42161} {
			a := s.do(t, http.MethodGet, fmt.Sprintf("/api/v1/tx/completions?chainId=%d&limit=1000", id), nil)
			items, _ := a.body["completions"].([]any)
			if a.status != http.StatusOK || len(items) != perSigner*len(signers) {
				t.Fatalf("chain %d feed: %d, %d entries, want %d: %s", id, a.status, len(items), perSigner*len(signers), a.raw)
			}
			for _, item := range items {
				if got := item.(map[string]any)["chainId"]; got != strconv.FormatUint(id, 10) {
					t.Fatalf("chain %d feed served an entry of chain %v", id, got)
				}
			}
		}
	})

	t.Run("admin and database keep the chains apart", func(t *testing.T) {
		for _, id := range []uint64{31337, 42161} {
			a := s.do(t, http.MethodGet, fmt.Sprintf("/api/v1/admin/signers/%s?chainId=%d", signers[0], id), nil)
			if a.status != http.StatusOK || a.body["nextNonce"] != strconv.Itoa(perSigner) || a.body["chainId"] != strconv.FormatUint(id, 10) {
				t.Fatalf("signer status on chain %d: %d %s", id, a.status, a.raw)
			}
		}
		if n := s.count(t, "SELECT count(DISTINCT chain_id) FROM signer_nonce_cursor WHERE signer = $1", signers[0]); n != 2 {
			t.Fatalf("the signer has cursors on %d chains, want 2", n)
		}
		if n := s.count(t, "SELECT count(*) FROM signer_lease WHERE signer = $1", signers[0]); n != 2 {
			t.Fatalf("the signer has %d leases, want one per chain", n)
		}
	})

	t.Run("metrics carry chain_id", func(t *testing.T) {
		metrics := s.do(t, http.MethodGet, "/metrics", nil).raw
		for _, id := range []uint64{31337, 42161} {
			want := fmt.Sprintf(`tx_create_total{chain_id="%d",result="created"} %d`, id, perSigner*len(signers))
			if !strings.Contains(metrics, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
	})
}

func otherChain(id uint64) uint64 {
	if id == 31337 {
		return 42161
	}
	return 31337
}

func ethClient(t testing.TB, sim *chain.SimulatedChain) *ethclient.Client {
	t.Helper()
	c, err := ethclient.DialContext(context.Background(), sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A chain whose endpoint serves another chain id than configured is refused at start, and a
// database that served one chain in the single-chain form refuses another network there but
// takes a new chain named under chains.
func TestChainsAreCheckedAtStart(t *testing.T) {
	t.Parallel()
	first, second := newChainWithID(t, 31337), newChainWithID(t, 42161)
	dsn := testsupport.MigratedDSN(t)
	start := func(configure func(*conf.Bootstrap)) error {
		bc, err := conf.Load("")
		if err != nil {
			t.Fatal(err)
		}
		bc.Database.DSN, bc.Database.MigrateOnStart = dsn, false
		key, err := chain.DevKey(0)
		if err != nil {
			t.Fatal(err)
		}
		bc.Signers.RawKeys = []string{hexutil.Encode(crypto.FromECDSA(key))}
		bc.Server.HTTP.Addr, bc.Server.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
		configure(bc)
		if err := bc.Check(); err != nil {
			return err
		}
		listeners, err := app.Listen(bc)
		if err != nil {
			t.Fatal(err)
		}
		defer listeners.Close()
		_, cleanup, err := app.New(bc, listeners, log.NewStdLogger(io.Discard), services.BuildVersion("test"))
		if err == nil {
			cleanup()
		}
		return err
	}
	tests := []struct {
		name      string
		configure func(*conf.Bootstrap)
		wantErr   string
	}{
		{"the single-chain form records its chain", func(bc *conf.Bootstrap) { bc.Chain.RPCURL = first.HTTPEndpoint() }, ""},
		{"an endpoint serving another id than configured", func(bc *conf.Bootstrap) {
			bc.Chains = []conf.Chain{{ID: 31337, RPCURL: first.HTTPEndpoint()}, {ID: 10, RPCURL: second.HTTPEndpoint()}}
		}, "configured as chain id 10, the endpoints serve chain id 42161"},
		{"the single-chain form against another network", func(bc *conf.Bootstrap) { bc.Chain.RPCURL = second.HTTPEndpoint() }, "belongs to chain id 31337"},
		{"a chain added under chains", func(bc *conf.Bootstrap) {
			bc.Chains = []conf.Chain{{ID: 31337, RPCURL: first.HTTPEndpoint()}, {ID: 42161, RPCURL: second.HTTPEndpoint()}}
		}, ""},
		{"the same id twice", func(bc *conf.Bootstrap) {
			bc.Chains = []conf.Chain{{ID: 31337, RPCURL: first.HTTPEndpoint()}, {ID: 31337, RPCURL: first.HTTPEndpoint()}}
		}, "listed twice"},
		{"an entry without its id", func(bc *conf.Bootstrap) { bc.Chains = []conf.Chain{{RPCURL: first.HTTPEndpoint()}} }, "chains[0].id: must be set"},
	}
	for _, tc := range tests {
		// In order: each case depends on what the database recorded before it.
		err := start(tc.configure)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Fatalf("%s: %v", tc.name, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Fatalf("%s: got %v, want an error naming %q", tc.name, err, tc.wantErr)
		}
	}
}

// A chain whose endpoint refuses connections at start does not keep the deployment's other
// chain from serving: the node starts and is ready, that chain's creates answer 503
// UNAVAILABLE and write nothing, and once the endpoint comes up the chain is verified and
// serves, in the same process.
func TestOneChainDownAtStartDoesNotHoldUpTheOther(t *testing.T) {
	t.Parallel()
	healthy, late := newChainWithID(t, 31337), newChainWithID(t, 42161)
	proxy, err := faultproxy.Start(late.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	if err := proxy.SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{chain: healthy, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chains = []conf.Chain{{ID: 31337, RPCURL: healthy.HTTPEndpoint()}, {ID: 42161, RPCURL: proxy.URL()}}
		bc.Chain.Health.ProbeInterval = conf.Duration(200 * time.Millisecond)
	}})
	signer, to := devAddress(t, 0), devAddress(t, 6)
	create := func(chainID uint64, request string) apiResponse {
		return s.create(t, map[string]any{"chainId": chainID, "signer": signer, "to": to, "value": "1", "gasLimit": 21000, "requestId": request})
	}

	if a := create(31337, "healthy-1"); a.status != http.StatusAccepted {
		t.Fatalf("create on the healthy chain: %d %s", a.status, a.raw)
	}
	if a := create(42161, "late-1"); a.status != http.StatusServiceUnavailable || a.reason() != "UNAVAILABLE" {
		t.Fatalf("create on the unreachable chain: %d %s, want 503 UNAVAILABLE", a.status, a.raw)
	}
	if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE chain_id = 42161"); n != 0 {
		t.Fatalf("the refused create wrote %d rows", n)
	}
	ready := s.do(t, http.MethodGet, "/readyz", nil)
	checks, _ := ready.body["checks"].(map[string]any)
	if ready.status != http.StatusOK || checks["chain_31337"] != "ok" || checks["chain_42161"] != "unreachable" {
		t.Fatalf("/readyz with one chain down: %d %s, want 200 with chain_31337 ok and chain_42161 unreachable", ready.status, ready.raw)
	}

	if err := proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	var id string
	waitFor(t, 30*time.Second, "the late chain to serve creates", func() bool {
		a := create(42161, "late-1")
		if a.status == http.StatusAccepted {
			id = a.tx()["txId"].(string)
		}
		return a.status == http.StatusAccepted
	})
	waitFor(t, time.Minute, "the late chain's tx to be CONFIRMED", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	mined, _, err := ethClient(t, late).TransactionByHash(t.Context(), common.HexToHash(s.tx(t, id).txHash))
	if err != nil || mined.ChainId().Uint64() != 42161 {
		t.Fatalf("the late chain's tx is not on it: %v", err)
	}
}
