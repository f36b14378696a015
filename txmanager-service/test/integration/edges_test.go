package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// forwardNode starts one forward-mode instance of a cluster sharing sim and dsn.
func forwardNode(t *testing.T, opts serviceOptions, configure func(*conf.Bootstrap)) *testService {
	t.Helper()
	opts.signers, opts.fastPipeline = 3, true
	opts.configure = func(bc *conf.Bootstrap) {
		bc.Routing.Mode = conf.RoutingForward
		bc.Lease.Duration, bc.Lease.RenewInterval, bc.Lease.ClockSkew = conf.Duration(3*time.Second), conf.Duration(time.Second), conf.Duration(200*time.Millisecond)
		bc.Routing.HeartbeatInterval, bc.Routing.NodeTimeout = conf.Duration(500*time.Millisecond), conf.Duration(2*time.Second)
		if configure != nil {
			configure(bc)
		}
	}
	return startService(t, opts)
}

func (s *testService) leaseOwner(t testing.TB, signer string) string {
	t.Helper()
	var owner string
	if err := s.pool.QueryRow(context.Background(), "SELECT owner_node FROM signer_lease WHERE signer = $1", signer).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	return owner
}

// Forwarding between nodes runs over mutual TLS with the peer CA: a node of the cluster
// forwards to the owner; a node whose CA is another one can neither verify the owner nor be
// verified by it, so it cannot forward, and it writes nothing while the owner holds the lease.
// A caller cannot claim to be a forwarded request: its hop count is ignored on HTTP and on
// gRPC without a peer certificate.
func TestForwardingOverMutualTLS(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	cluster, stranger := newTestPKI(t, "cluster"), newTestPKI(t, "stranger")
	owner := forwardNode(t, serviceOptions{chain: sim, dsn: dsn, pki: cluster}, nil)
	peer := forwardNode(t, serviceOptions{chain: sim, dsn: dsn, pki: cluster}, nil)
	outsider := forwardNode(t, serviceOptions{chain: sim, dsn: dsn, pki: stranger}, func(bc *conf.Bootstrap) {
		bc.Server.HTTP.Timeout = conf.Duration(3 * time.Second)
	})
	signer, to := devAddress(t, 0), devAddress(t, 5)

	owner.createOK(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000})
	if got := owner.leaseOwner(t, signer); !strings.HasPrefix(got, owner.nodeID+"#") {
		t.Fatalf("lease owner %s, want the node that served the first create (%s)", got, owner.nodeID)
	}
	ownerID := owner.leaseOwner(t, signer)

	t.Run("a peer with the cluster CA forwards", func(t *testing.T) {
		a := peer.create(t, map[string]any{"signer": signer, "to": to, "value": "2", "gasLimit": 21000})
		if a.status != http.StatusAccepted {
			t.Fatalf("create through the peer: %d %s", a.status, a.raw)
		}
		if got := owner.leaseOwner(t, signer); got != ownerID {
			t.Fatalf("lease moved to %s: the peer served the create itself instead of forwarding", got)
		}
	})

	t.Run("a caller's hop count is ignored", func(t *testing.T) {
		// With maxHops 1, an honoured hop count of 1 would stop the peer from forwarding and
		// the create would wait for the owner's lease to lapse, which it never does.
		a := peer.doAs(t, http.MethodPost, "/api/v1/tx", []byte(fmt.Sprintf(`{"signer":%q,"to":%q,"value":"3","gasLimit":21000}`, signer, to)), "x-txm-hops", "1")
		if a.status != http.StatusAccepted {
			t.Fatalf("HTTP create claiming a hop: %d %s", a.status, a.raw)
		}
		conn, err := grpc.NewClient(peer.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cluster.clientTLS())))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-txm-hops", "1"), 10*time.Second)
		defer cancel()
		if _, err := v1.NewTxServiceClient(conn).CreateTx(ctx, &v1.CreateTxRequest{Signer: signer, To: to, Value: "4", GasLimit: 21000}); err != nil {
			t.Fatalf("gRPC create claiming a hop without a peer certificate: %v", err)
		}
	})

	t.Run("a node without the cluster CA cannot forward", func(t *testing.T) {
		before := owner.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1", signer)
		a := outsider.create(t, map[string]any{"signer": signer, "to": to, "value": "5", "gasLimit": 21000})
		if a.status != http.StatusServiceUnavailable || a.reason() != "UNAVAILABLE" {
			t.Fatalf("create through a node with another CA: %d %s, want 503 UNAVAILABLE", a.status, a.raw)
		}
		if after := owner.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1", signer); after != before {
			t.Fatalf("transactions went from %d to %d: the outsider's create reached the owner or was written", before, after)
		}
		if got := owner.leaseOwner(t, signer); got != ownerID {
			t.Fatalf("lease moved to %s", got)
		}
	})
}

// A client that sends its request headers slower than server.http.readHeaderTimeout is
// disconnected instead of holding a connection (slow-loris).
func TestSlowHeadersAreCutOff(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Server.HTTP.ReadHeaderTimeout = conf.Duration(300 * time.Millisecond)
	}})
	conn, err := net.Dial("tcp", s.httpURL[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = bufio.NewReader(conn).ReadByte()
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		t.Fatal("the server kept a connection with unfinished headers open for 20s")
	}
	if err == nil {
		t.Fatal("the server answered a request whose headers never finished")
	}
}

// A credential beyond its rate gets 429 RATE_LIMITED with Retry-After (HTTP) or
// ResourceExhausted with the same reason (gRPC); nothing is served for it.
func TestRateLimitPerCredential(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Server.RateLimit = conf.RateLimit{Enabled: true, RequestsPerSecond: 0.5, Burst: 3}
	}})
	path := "/api/v1/tx/" + uuid.NewString()
	var statuses []int
	var limited apiResponse
	for range 5 {
		a := s.do(t, http.MethodGet, path, nil)
		statuses = append(statuses, a.status)
		if a.status == http.StatusTooManyRequests {
			limited = a
		}
	}
	want := []int{404, 404, 404, 429, 429}
	if fmt.Sprint(statuses) != fmt.Sprint(want) {
		t.Fatalf("statuses %v, want %v", statuses, want)
	}
	if limited.reason() != "RATE_LIMITED" || limited.retryAfter == "" || limited.retryAfter == "0" {
		t.Fatalf("429 answer: reason %q Retry-After %q: %s", limited.reason(), limited.retryAfter, limited.raw)
	}
	_, err := s.grpc.GetTx(context.Background(), &v1.GetTxRequest{TxId: uuid.NewString()})
	if st, _ := status.FromError(err); st.Code() != codes.ResourceExhausted {
		t.Fatalf("gRPC beyond the rate: %v, want ResourceExhausted", err)
	}
	if got := s.metricSums(t)["rate_limited_total"]; got < 3 {
		t.Fatalf("rate_limited_total = %v, want at least 3", got)
	}
}

// However hard /readyz is hit, the database is pinged and the chain asked at most once per
// server.readinessInterval: readiness answers from a cached probe.
func TestReadinessProbesAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	const interval = 500 * time.Millisecond
	s := startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Server.ReadinessInterval = conf.Duration(interval)
	}})
	start := time.Now()
	before := s.metricSums(t)["readiness_probe_total"]
	var served atomic.Int64
	var wg sync.WaitGroup
	deadline := start.Add(2 * time.Second)
	for range 16 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				resp, err := s.http.Get(s.httpURL + "/readyz")
				if err != nil {
					t.Error(err)
					return
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					served.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	probes := s.metricSums(t)["readiness_probe_total"] - before
	allowed := float64(elapsed/interval) + 1
	t.Logf("%d ready answers in %s from %.0f probes", served.Load(), elapsed.Round(time.Millisecond), probes)
	if served.Load() < 100 {
		t.Fatalf("only %d ready answers: the load did not happen", served.Load())
	}
	if probes < 1 || probes > allowed {
		t.Fatalf("%.0f probes for %d requests in %s, want between 1 and %.0f", probes, served.Load(), elapsed, allowed)
	}
}
