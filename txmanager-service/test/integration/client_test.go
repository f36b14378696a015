package integration

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	txmclient "github.com/bionicotaku/txmanager-service/client"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

func newClient(t *testing.T, cfg txmclient.Config) *txmclient.Client {
	t.Helper()
	c, cleanup, err := txmclient.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return c
}

// Two nodes in basic routing, the client given both: whichever it asks first, every create
// lands on the lease owner exactly once (NOT_LEADER moves it to the other node; the request
// id makes any retry a replay).
func TestClientCreatesLandOnTheOwnerOnce(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 2, conf.RoutingBasic)
	signer := devAddress(t, 0)
	// The second node owns the signer: the client, asking the first node first, is told
	// NOT_LEADER on every create.
	nodes[1].createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1", "gasLimit": 21000})
	client := newClient(t, txmclient.Config{Endpoints: []string{nodes[0].grpcAddr, nodes[1].grpcAddr}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seen := map[string]string{}
	for i := range 20 {
		req := &v1.CreateTxRequest{Signer: signer, To: devAddress(t, 5), Value: fmt.Sprint(i + 2), GasLimit: 21000, RequestId: fmt.Sprintf("client-%d", i)}
		resp, err := client.Create(ctx, req)
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if again, err := client.Create(ctx, req); err != nil || again.GetTx().GetTxId() != resp.GetTx().GetTxId() || again.GetCreated() {
			t.Fatalf("replay of create %d: %v %v, want the same transaction, not created", i, again, err)
		}
		seen[req.RequestId] = resp.GetTx().GetTxId()
	}
	if n := nodes[0].count(t, "SELECT count(*) FROM managed_tx WHERE request_id LIKE 'client-%'"); n != 20 {
		t.Fatalf("%d transactions for 20 creates", n)
	}
	if owner := nodes[0].leaseOwner(t, signer); !strings.HasPrefix(owner, nodes[1].nodeID+"#") {
		t.Fatalf("lease owner %s, want the second node", owner)
	}
	if _, err := client.Create(ctx, &v1.CreateTxRequest{Signer: signer, To: devAddress(t, 5), Value: "1", GasLimit: 21000}); !errors.Is(err, txmclient.ErrRequestIDRequired) {
		t.Fatalf("create without a request id: %v, want ErrRequestIDRequired", err)
	}
}

// A rate-limited create is retried after the Retry-After the service gave, not before, and
// then succeeds.
func TestClientRespectsRetryAfter(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Server.RateLimit = conf.RateLimit{Enabled: true, RequestsPerSecond: 0.5, Burst: 1}
	}})
	client := newClient(t, txmclient.Config{Endpoints: []string{s.grpcAddr}, Backoff: 10 * time.Millisecond})
	ctx := context.Background()
	signer := devAddress(t, 0)
	if _, err := client.Create(ctx, &v1.CreateTxRequest{Signer: signer, To: devAddress(t, 5), Value: "1", GasLimit: 21000, RequestId: "first"}); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	resp, err := client.Create(ctx, &v1.CreateTxRequest{Signer: signer, To: devAddress(t, 5), Value: "2", GasLimit: 21000, RequestId: "second"})
	waited := time.Since(started)
	if err != nil || !resp.GetCreated() {
		t.Fatalf("rate-limited create: %v %v", resp, err)
	}
	if limited := s.metricSums(t)["rate_limited_total"]; limited != 1 {
		t.Fatalf("rate_limited_total = %v: the client retried %v times before Retry-After, want 1 refusal then success", limited, limited)
	}
	if waited < time.Second {
		t.Fatalf("the client retried after %s, before the Retry-After it was given", waited)
	}
	if got := s.do(t, http.MethodGet, "/api/v1/tx/by-request?signer="+signer+"&requestId=second", nil); got.status == http.StatusOK {
		t.Logf("rate-limited create retried after %s and landed once", waited.Round(time.Millisecond))
	}
}
