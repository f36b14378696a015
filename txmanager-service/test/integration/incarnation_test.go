package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A process killed and started again under the same node id is a new lease owner: its
// first acquisition increments the token. A second live process given a node id already
// in use refuses to serve, so no token is ever held by two processes.
func TestIncarnationsOfOneNodeID(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	bin := buildServiceBinary(t)
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	cfg := e2e.FastLoops(e2e.ServiceConfig{NodeID: "twin", DatabaseDSN: dsn, ChainRPCURL: sim.HTTPEndpoint(), Signers: sim.DevKeys()[:1],
		Overrides: map[string]any{
			"lease.duration": "3s", "lease.renewInterval": "1s", "lease.clockSkew": "200ms",
			"routing.heartbeatInterval": "300ms", "routing.nodeTimeout": "1500ms",
		}})
	signer := devAddress(t, 0)
	// A restarted process is a stranger to the lease its predecessor left: it answers
	// NOT_LEADER until that lease lapses, then takes it over.
	create := func(t *testing.T, s *e2e.Service, value string) {
		t.Helper()
		body := `{"signer":"` + signer + `","to":"` + devAddress(t, 5) + `","value":"` + value + `","gasLimit":21000,"requestId":"v` + value + `"}`
		for deadline := time.Now().Add(30 * time.Second); ; {
			resp, err := http.Post(s.HTTPURL()+"/api/v1/tx", "application/json", strings.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusAccepted || resp.StatusCode == http.StatusOK:
				return
			case resp.StatusCode == http.StatusConflict && time.Now().Before(deadline):
				time.Sleep(200 * time.Millisecond)
			default:
				t.Fatalf("create through %s: %d", s.Config().NodeID, resp.StatusCode)
			}
		}
	}
	pool := pgtest.NewPool(t, dsn)
	lease := func(t *testing.T) (owner string, token int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, "SELECT owner_node, fencing_token FROM signer_lease WHERE signer = $1", signer).Scan(&owner, &token); err != nil {
			t.Fatal(err)
		}
		return owner, token
	}

	logs := t.TempDir()
	first, err := e2e.StartService(ctx, e2e.ServiceOptions{Bin: bin, Config: cfg, Dir: logs + "/first"})
	if err != nil {
		t.Fatal(err)
	}
	create(t, first, "1")
	owner1, token1 := lease(t)
	first.Kill()

	restarted, err := e2e.StartService(ctx, e2e.ServiceOptions{Bin: bin, Config: first.Config(), Dir: logs + "/restarted"})
	if err != nil {
		t.Fatalf("restart under the same node id: %v", err)
	}
	defer func() { _ = restarted.Stop() }()
	create(t, restarted, "2")
	owner2, token2 := lease(t)
	if owner2 == owner1 || !strings.HasPrefix(owner2, "twin#") || token2 <= token1 {
		t.Fatalf("after SIGKILL and restart: owner %s token %d, before: owner %s token %d; want a new owner and a higher token", owner2, token2, owner1, token1)
	}

	twin, err := e2e.StartService(ctx, e2e.ServiceOptions{Bin: bin, Config: cfg, Dir: logs + "/twin"})
	if err == nil {
		_ = twin.Stop()
		t.Fatal("a second live process with node id twin started serving")
	}
	if !strings.Contains(err.Error(), "node id in use by another live process") {
		t.Fatalf("the second process failed, but not because the node id is in use: %v", err)
	}
	create(t, restarted, "3")
	if owner, token := lease(t); owner != owner2 || token != token2 {
		t.Fatalf("the refused twin disturbed the lease: owner %s token %d, want %s %d", owner, token, owner2, token2)
	}
	// Every lease epoch (token) was held by exactly one process.
	holders := map[float64]map[string]bool{}
	for _, dir := range []string{logs + "/first", logs + "/restarted", logs + "/twin"} {
		f, err := os.Open(dir + "/service.log")
		if err != nil {
			continue // the twin may have left no log if it failed early
		}
		scanner := bufio.NewScanner(f)
		scanner.Buffer(make([]byte, 1<<20), 1<<20)
		for scanner.Scan() {
			var line map[string]any
			if json.Unmarshal(scanner.Bytes(), &line) != nil || line["msg"] != "lease acquired" {
				continue
			}
			token, _ := line["fencing_token"].(float64)
			if holders[token] == nil {
				holders[token] = map[string]bool{}
			}
			holders[token][dir] = true
		}
		f.Close()
	}
	if len(holders) < 2 {
		t.Fatalf("lease acquisitions seen in the logs: %v, want at least the two processes'", holders)
	}
	for token, procs := range holders {
		if len(procs) != 1 {
			t.Fatalf("token %v was acquired by %d processes: %v", token, len(procs), procs)
		}
	}
}
