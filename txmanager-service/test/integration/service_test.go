package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testService is the whole service, wired exactly as main wires it, on a fresh database,
// the embedded chain and free loopback ports.
type testService struct {
	nodeID   string
	httpURL  string
	grpcAddr string
	// http reaches httpURL (trusting the test CA when the service serves TLS).
	http *http.Client
	pool *pgxpool.Pool
	grpc v1.TxServiceClient
	// stop shuts the instance down gracefully, as SIGTERM would; later calls do nothing.
	stop func(t testing.TB)
}

type serviceOptions struct {
	chainQuery bool
	// chain, when set, is a test-owned chain (go-ethereum's simulated backend or anvil) the
	// service reaches over JSON-RPC; its first signers dev accounts become the service's raw
	// keys. Otherwise the service runs its own embedded chain.
	chain   devChain
	signers int
	// fastPipeline shortens every pipeline interval for tests.
	fastPipeline bool
	// dsn shares a database with other instances (a cluster); empty means a fresh one.
	dsn       string
	configure func(*conf.Bootstrap)
	// logs receives the service's log lines (JSON), besides stderr under -v.
	logs io.Writer
	// pki, when set, makes the service serve TLS with a certificate pki issued and, unless
	// withoutPeerTLS, forward over mutual TLS with pki as the peer CA.
	pki            *testPKI
	withoutPeerTLS bool
}

func startService(t testing.TB, opts serviceOptions) *testService {
	t.Helper()
	s, err := tryStartService(t, opts)
	if err != nil {
		t.Fatalf("wire: %v", err)
	}
	return s
}

// tryStartService is startService, returning the error when the service cannot be built
// (a key source that refuses it, a configuration it rejects) instead of failing t.
func tryStartService(t testing.TB, opts serviceOptions) (*testService, error) {
	t.Helper()
	dsn := opts.dsn
	if dsn == "" {
		dsn = testsupport.MigratedDSN(t)
	}
	bc, err := conf.Load("")
	if err != nil {
		t.Fatal(err)
	}
	bc.Database.DSN = dsn
	bc.Database.MigrateOnStart = false
	bc.Server.HTTP.Addr = "127.0.0.1:0"
	bc.Server.GRPC.Addr = "127.0.0.1:0"
	bc.Nonce.ChainQuery.Enabled = opts.chainQuery
	bc.Chain.Embedded.BlockInterval = conf.Duration(200 * time.Millisecond)
	if opts.chain != nil {
		bc.Chain.RPCURL = opts.chain.HTTPEndpoint()
		for _, key := range opts.chain.DevKeys()[:max(opts.signers, 1)] {
			bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(key)))
		}
	}
	if opts.fastPipeline {
		fast := conf.Duration(100 * time.Millisecond)
		bc.Pipeline.SubmitInterval, bc.Pipeline.FinalityInterval, bc.Pipeline.AdoptInterval = fast, fast, fast
		bc.Pipeline.Receipts.PollInterval, bc.Resubmit.ScanInterval, bc.Stuck.ScanInterval = fast, fast, fast
		bc.Resubmit.Interval = conf.Duration(time.Second)
		bc.Confirmations.Required = 3
	}
	httpClient, grpcCreds, scheme := http.DefaultClient, insecure.NewCredentials(), "http"
	if opts.pki != nil {
		bc.Server.TLS = conf.TLS{CertFile: opts.pki.certFile, KeyFile: opts.pki.keyFile}
		if !opts.withoutPeerTLS {
			bc.Routing.PeerTLS = conf.PeerTLS{CAFile: opts.pki.caFile, CertFile: opts.pki.certFile, KeyFile: opts.pki.keyFile}
		}
		httpClient, grpcCreds, scheme = opts.pki.httpClient(), credentials.NewTLS(opts.pki.clientTLS()), "https"
	}
	if opts.configure != nil {
		opts.configure(bc)
	}
	// Bound here and handed to the service, so no other test can take a port between
	// choosing it and serving on it.
	listeners, err := app.Listen(bc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listeners.Close() })
	bc.Node.ID = "test-" + bc.Server.GRPC.Addr
	sink := io.Discard
	if testing.Verbose() {
		sink = os.Stderr
	}
	if opts.logs != nil {
		sink = io.MultiWriter(sink, opts.logs)
	}
	logger := telemetry.NewNodeLogger(telemetry.NewJSONLogger(sink, log.LevelDebug), bc.Node.ID)
	service, cleanup, err := app.New(bc, listeners, logger, services.BuildVersion("test"))
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- service.Run() }()
	var stopOnce sync.Once
	stop := func(t testing.TB) {
		stopOnce.Do(func() {
			if err := service.Stop(); err != nil {
				t.Errorf("stop: %v", err)
			}
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
			cleanup()
		})
	}
	t.Cleanup(func() { stop(t) })
	s := &testService{nodeID: bc.Node.ID, httpURL: scheme + "://" + bc.Server.HTTP.Addr, grpcAddr: bc.Server.GRPC.Addr, http: httpClient, pool: pgtest.NewPool(t, dsn), stop: stop}
	s.waitReady(t)
	conn, err := grpc.NewClient(s.grpcAddr, grpc.WithTransportCredentials(grpcCreds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	s.grpc = v1.NewTxServiceClient(conn)
	return s, nil
}

func (s *testService) waitReady(t testing.TB) {
	t.Helper()
	waitFor(t, 30*time.Second, "service at "+s.httpURL+" to become ready", func() bool {
		resp, err := s.http.Get(s.httpURL + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitForProgress waits for cond like waitFor, but bounds the time without progress rather
// than the whole wait: as long as progress (a fingerprint of the pipeline's state) keeps
// changing, a slow machine (the race detector on two busy cores) is not a failure; only a
// pipeline that stands still for stall, or a wait beyond limit, is.
func waitForProgress(t testing.TB, stall, limit time.Duration, what string, progress func() string, cond func() bool) {
	t.Helper()
	started := time.Now()
	last, lastChange := progress(), time.Now()
	for !cond() {
		now := time.Now()
		if now.Sub(lastChange) > stall {
			t.Fatalf("no progress for %s waiting for %s (last state %s)", stall, what, last)
		}
		if now.Sub(started) > limit {
			t.Fatalf("timed out after %s waiting for %s (last state %s)", limit, what, last)
		}
		time.Sleep(50 * time.Millisecond)
		if p := progress(); p != last {
			last, lastChange = p, time.Now()
		}
	}
}

// apiResponse is an HTTP answer: status, Retry-After and the decoded JSON body.
type apiResponse struct {
	status     int
	retryAfter string
	body       map[string]any
	raw        string
}

func (s *testService) do(t *testing.T, method, path string, body []byte) apiResponse {
	t.Helper()
	return s.doAs(t, method, path, body, "", "")
}

// doAs is do with one credential header (none when header is empty).
func (s *testService) doAs(t *testing.T, method, path string, body []byte, header, value string) apiResponse {
	t.Helper()
	req, err := http.NewRequest(method, s.httpURL+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if header != "" {
		req.Header.Set(header, value)
	}
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	return readResponse(resp)
}

func readResponse(resp *http.Response) apiResponse {
	raw, _ := io.ReadAll(resp.Body)
	out := apiResponse{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), raw: string(raw)}
	_ = json.Unmarshal(raw, &out.body)
	return out
}

func (s *testService) create(t *testing.T, payload map[string]any) apiResponse {
	t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return s.do(t, http.MethodPost, "/api/v1/tx", body)
}

func (r apiResponse) tx() map[string]any {
	tx, _ := r.body["tx"].(map[string]any)
	return tx
}

func (r apiResponse) reason() string {
	reason, _ := r.body["reason"].(string)
	return reason
}

func (s *testService) count(t testing.TB, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := s.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// devAddress is the embedded chain's i-th funded development account.
func devAddress(t testing.TB, i int) string {
	t.Helper()
	key, err := chain.DevKey(i)
	if err != nil {
		t.Fatal(err)
	}
	return crypto.PubkeyToAddress(key.PublicKey).Hex()
}

// createConcurrently sends n creates, at most parallel at a time, and returns the answers
// in request order.
func createConcurrently(t *testing.T, s *testService, n, parallel int, payload func(i int) map[string]any) []apiResponse {
	t.Helper()
	answers := make([]apiResponse, n)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			answers[i] = s.create(t, payload(i))
		})
	}
	wg.Wait()
	return answers
}

// requireStatus fails t unless every answer has one of the statuses, quoting the first
// offender rather than every one.
func requireStatus(t *testing.T, answers []apiResponse, statuses ...int) {
	t.Helper()
	bad, first := 0, -1
	for i, a := range answers {
		if !slices.Contains(statuses, a.status) {
			bad++
			if first < 0 {
				first = i
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d creates failed; first: %d %s", bad, len(answers), answers[first].status, answers[first].raw)
	}
}

// requireOneTxID fails t unless the answers to concurrent creates with one (signer,
// requestId) name a single txId and exactly one of them (202) created it; it returns how
// often each txId was answered.
func requireOneTxID(t *testing.T, answers []apiResponse) map[string]int {
	t.Helper()
	ids, created := map[string]int{}, 0
	for _, a := range answers {
		if a.status == http.StatusAccepted {
			created++
		}
		ids[a.tx()["txId"].(string)]++
	}
	if len(ids) != 1 || created != 1 {
		t.Fatalf("distinct txIds = %v, 202s = %d; want one txId and exactly one 202", ids, created)
	}
	return ids
}

// requireContiguousNonces fails t unless the nonces of len(nonces) creates are
// 0..len(nonces)-1, each handed out once.
func requireContiguousNonces(t *testing.T, nonces []uint64) {
	t.Helper()
	if r := e2e.CheckNonces(nonces, uint64(len(nonces))); !r.OK() {
		t.Fatalf("nonces of %d creates: %s", len(nonces), r)
	}
}

// checkContiguous fails b unless the signer's transactions carry the nonces 0..n-1, each
// once.
func checkContiguous(b testing.TB, pool *pgxpool.Pool, signer string) {
	b.Helper()
	var count, distinct, maxNonce int64
	err := pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT nonce), coalesce(max(nonce), -1) FROM managed_tx WHERE signer = $1", signer).Scan(&count, &distinct, &maxNonce)
	if err != nil {
		b.Fatal(err)
	}
	if count != distinct || maxNonce != count-1 {
		b.Fatalf("nonces of signer %s are not 0..n-1: count %d distinct %d max %d", signer, count, distinct, maxNonce)
	}
}

// pageCompletions reads the completions feed from the start in small pages until want
// completions were served and one page more (e2e.Client.ReadCompletions, which keeps
// polling while another transaction on the cluster holds the feed back), failing t on a
// completion served twice; it returns each served txId's status.
func (s *testService) pageCompletions(t *testing.T, want int) map[string]string {
	t.Helper()
	completions, err := e2e.NewClient(s.httpURL).ReadCompletions(t.Context(), 37, want, 60*time.Second)
	if err != nil {
		t.Fatalf("completions: %v", err)
	}
	seen := map[string]string{}
	for _, c := range completions {
		if _, dup := seen[c.GetTxId()]; dup {
			t.Fatalf("completion for %s served twice", c.GetTxId())
		}
		seen[c.GetTxId()] = c.GetStatus()
	}
	return seen
}
