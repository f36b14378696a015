package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// startCluster runs n instances on one database and one chain, in the given routing mode.
func startCluster(t *testing.T, n int, mode string) []*testService {
	t.Helper()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	nodes := make([]*testService, n)
	for i := range nodes {
		nodes[i] = startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, dsn: dsn, configure: func(bc *conf.Bootstrap) {
			bc.Routing.Mode = mode
			bc.Lease.Duration, bc.Lease.RenewInterval, bc.Lease.ClockSkew = conf.Duration(3*time.Second), conf.Duration(time.Second), conf.Duration(200*time.Millisecond)
			bc.Routing.HeartbeatInterval, bc.Routing.NodeTimeout = conf.Duration(500*time.Millisecond), conf.Duration(2*time.Second)
		}})
	}
	return nodes
}

// Issue 5: with random routing, forward mode hides lease ownership from clients (no
// NOT_LEADER), basic mode answers non-owners with NOT_LEADER + Retry-After and nothing
// else. Either way one signer's nonces come out contiguous.
func TestRoutingModesUnderRandomRouting(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{conf.RoutingForward, conf.RoutingBasic} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			nodes := startCluster(t, 3, mode)
			signers := []string{devAddress(t, 0), devAddress(t, 1), devAddress(t, 2)}
			type answer struct {
				status     int
				reason     string
				retryAfter string
			}
			answers := make(chan answer, 600)
			var wg sync.WaitGroup
			for c := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(c), 99))
					for i := range 50 {
						node := nodes[r.IntN(len(nodes))]
						a := node.create(t, map[string]any{"signer": signers[r.IntN(len(signers))], "to": devAddress(t, 7), "value": fmt.Sprint(c*1000 + i + 1), "gasLimit": 21000})
						answers <- answer{a.status, a.reason(), a.retryAfter}
					}
				}()
			}
			wg.Wait()
			close(answers)
			counts := map[string]int{}
			for a := range answers {
				key := fmt.Sprint(a.status, " ", a.reason)
				counts[key]++
				switch {
				case a.status == http.StatusAccepted:
				case mode == conf.RoutingBasic && a.status == http.StatusConflict && a.reason == "NOT_LEADER":
					if a.retryAfter == "" {
						t.Fatalf("NOT_LEADER without Retry-After")
					}
				default:
					t.Fatalf("%s mode: unexpected answer %d %s (all so far: %v)", mode, a.status, a.reason, counts)
				}
			}
			if mode == conf.RoutingForward && counts["202 "] != 600 {
				t.Fatalf("forward mode answers: %v, want 600 created", counts)
			}
			if mode == conf.RoutingBasic && counts["409 NOT_LEADER"] == 0 {
				t.Fatalf("basic mode answers: %v; random routing over 3 nodes must have hit a non-owner", counts)
			}
			t.Logf("%s mode answers: %v", mode, counts)
			for _, signer := range signers {
				checkContiguous(t, nodes[0].pool, signer)
			}
		})
	}
}

// Issue 5, lease lifecycle: a node stopped gracefully (SIGTERM) flushes its writer and
// releases its leases, so a peer takes the signer over at once instead of after expiry,
// with the next token and the next nonce.
func TestGracefulShutdownHandsLeasesToAPeer(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	const leaseDuration = 30 * time.Second
	start := func() *testService {
		return startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, configure: func(bc *conf.Bootstrap) {
			bc.Routing.Mode = conf.RoutingBasic
			bc.Lease.Duration, bc.Lease.RenewInterval = conf.Duration(leaseDuration), conf.Duration(5*time.Second)
		}})
	}
	a, b := start(), start()
	signer := devAddress(t, 0)
	create := func(node *testService, i int) apiResponse {
		return node.create(t, map[string]any{"signer": signer, "to": devAddress(t, 7), "value": fmt.Sprint(i + 1), "gasLimit": 21000})
	}
	for i := range 3 {
		if r := create(a, i); r.status != http.StatusAccepted {
			t.Fatalf("create %d on A: %d %s", i, r.status, r.raw)
		}
	}
	if r := create(b, 3); r.status != http.StatusConflict || r.reason() != "NOT_LEADER" {
		t.Fatalf("create on B while A holds the lease: %d %s, want 409 NOT_LEADER", r.status, r.raw)
	}
	lease := func() (owner string, token int64, live bool) {
		t.Helper()
		err := b.pool.QueryRow(t.Context(), "SELECT owner_node, fencing_token, expires_at > now() FROM signer_lease WHERE signer = $1", signer).Scan(&owner, &token, &live)
		if err != nil {
			t.Fatal(err)
		}
		return owner, token, live
	}
	ownerA, tokenA, live := lease()
	if !live {
		t.Fatalf("A's lease (%s, token %d) is not live before the shutdown", ownerA, tokenA)
	}

	stopped := time.Now()
	a.stop(t)
	// Right after A's stop the lease is A's and released, or B's adoption loop has already
	// taken it over with the next token; never still live for A.
	owner, token, live := lease()
	releasedByA := owner == ownerA && token == tokenA && !live
	adoptedByB := owner != ownerA && token == tokenA+1 && live
	if !releasedByA && !adoptedByB {
		t.Fatalf("after A's graceful stop the lease is (%s, token %d, live %t), want A's released or B's with token %d", owner, token, live, tokenA+1)
	}
	// B trusts what it saw of A's lease for up to a second (a non-owner answers from memory
	// instead of asking the database on every request): a client retrying after the
	// Retry-After it was given gets B.
	r := create(b, 3)
	for r.status == http.StatusConflict && r.reason() == "NOT_LEADER" && time.Since(stopped) < 3*time.Second {
		time.Sleep(200 * time.Millisecond)
		r = create(b, 3)
	}
	tookOver := time.Since(stopped)
	if r.status != http.StatusAccepted {
		t.Fatalf("create on B after A stopped: %d %s", r.status, r.raw)
	}
	if nonce := r.tx()["nonce"]; fmt.Sprint(nonce) != "3" {
		t.Fatalf("B allocated nonce %v, want 3 (A's 0..2 continue)", nonce)
	}
	if tookOver >= leaseDuration/2 {
		t.Fatalf("B took over %s after A stopped: that is waiting for expiry, not a release", tookOver)
	}
	if owner, token, live := lease(); !live || owner == ownerA || token != tokenA+1 {
		t.Fatalf("lease after B's create: (%s, token %d, live %t), want B's with token %d", owner, token, live, tokenA+1)
	}
	waitFor(t, 30*time.Second, "all four transactions confirmed by B", func() bool {
		return b.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'", signer) == 4
	})
	t.Logf("B took over %s after A's graceful stop (lease duration %s)", tookOver.Round(time.Millisecond), leaseDuration)
}

// A non-owner in forward mode sends the creates waiting for one owner together: under a
// burst of concurrent creates, every one is created (nonces contiguous), and the owner
// received them in fewer ForwardCreates calls than there were creates.
func TestForwardedCreatesTravelInBatches(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 2, conf.RoutingForward)
	owner, other := nodes[0], nodes[1]
	signer := devAddress(t, 0)
	// The first create makes nodes[0] the owner; the second teaches the other node so.
	for _, n := range []*testService{owner, other} {
		if a := n.create(t, map[string]any{"signer": signer, "to": devAddress(t, 7), "value": "1", "gasLimit": 21000}); a.status != http.StatusAccepted {
			t.Fatalf("first creates: %d %s", a.status, a.raw)
		}
	}
	const clients, perClient = 48, 10
	statuses := make(chan int, clients*perClient)
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := range perClient {
				statuses <- other.create(t, map[string]any{"signer": signer, "to": devAddress(t, 7), "value": fmt.Sprint(c*1000 + i + 2), "gasLimit": 21000}).status
			}
		})
	}
	wg.Wait()
	close(statuses)
	created := 0
	for s := range statuses {
		if s == http.StatusAccepted {
			created++
		}
	}
	if created != clients*perClient {
		t.Fatalf("%d of %d forwarded creates were created", created, clients*perClient)
	}
	checkContiguous(t, owner.pool, signer)

	calls := 0.0
	for line := range strings.Lines(owner.do(t, http.MethodGet, "/metrics", nil).raw) {
		if strings.HasPrefix(line, "server_requests_code_total{") && strings.Contains(line, `operation="/txmanager.v1.PeerService/ForwardCreates"`) {
			fields := strings.Fields(line)
			v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
			if err != nil {
				t.Fatalf("metric line %q: %v", line, err)
			}
			calls += v
		}
	}
	// Each create forwarded alone would make a call each (at least 481 with the second of
	// the first creates); batching makes far fewer.
	if calls == 0 || calls > float64(clients*perClient)/2 {
		t.Fatalf("the owner served %.0f ForwardCreates calls for %d forwarded creates, want some and at most half as many", calls, clients*perClient+1)
	}
	t.Logf("%d forwarded creates arrived in %.0f calls", clients*perClient+1, calls)

	// A client is not a peer: a batch would cost it one request of its rate limit.
	conn, err := grpc.NewClient(owner.grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, err = v1.NewPeerServiceClient(conn).ForwardCreates(context.Background(), &v1.ForwardCreatesRequest{
		Creates: []*v1.CreateTxRequest{{Signer: signer, To: devAddress(t, 7), Value: "1", GasLimit: 21000}},
	})
	if se := kerrors.FromError(err); se.Reason != v1.ErrorReason_PERMISSION_DENIED.String() {
		t.Fatalf("a client's ForwardCreates: %v, want PERMISSION_DENIED", err)
	}
}
