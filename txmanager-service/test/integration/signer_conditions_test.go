package integration

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Every node reports every signer's condition, read from the database, whichever node holds
// which lease: one scrape of any node shows the whole roster (quarantined, recovering,
// signing failing, unsigned backlog), and /readyz names the signers that cannot serve as a
// detail while the node stays in service.
func TestEveryNodeShowsEverySignersCondition(t *testing.T) {
	t.Parallel()
	nodes := startCluster(t, 3, conf.RoutingBasic)
	ctx := context.Background()
	signers := []string{devAddress(t, 0), devAddress(t, 1), devAddress(t, 2)}
	// Each node takes one signer's lease with a create of its own.
	for i, node := range nodes[:2] {
		id := node.createOK(t, map[string]any{"signer": signers[i], "to": devAddress(t, 7), "value": "1", "gasLimit": 21000})
		// Its first signature under the lease records that the key source signs: the failure
		// written below comes after it, as a later failure would.
		waitFor(t, 30*time.Second, "the create signed", func() bool { return node.tx(t, id).txHash != "" })
	}
	if a, b := nodes[0].leaseOwner(t, signers[0]), nodes[1].leaseOwner(t, signers[1]); a == b {
		t.Fatalf("both leases on %s: the test needs them on different nodes", a)
	}
	// Signer 2 is quarantined (the chain two nonces ahead, nothing there to record), and
	// signer 1's key source fails, as its lease holder recorded it.
	for _, stmt := range []string{
		fmt.Sprintf(`INSERT INTO signer_quarantine (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token) VALUES (%d, '%s', 0, 2, 'test', 1)`,
			chain.SimulatedChainID, signers[2]),
		fmt.Sprintf(`INSERT INTO signer_signing (chain_id, signer, failing_since, last_error, node_id, fencing_token) VALUES (%d, '%s', now(), 'kms: key disabled', 'test', 1)
			ON CONFLICT (chain_id, signer) DO UPDATE SET failing_since = EXCLUDED.failing_since, last_error = EXCLUDED.last_error`,
			chain.SimulatedChainID, signers[1]),
	} {
		if _, err := nodes[0].pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]map[string]float64{ // metric -> signer -> value
		"signer_quarantined":      {signers[0]: 0, signers[1]: 0, signers[2]: 1},
		"signer_signing_failing":  {signers[0]: 0, signers[1]: 1, signers[2]: 0},
		"signer_recovering":       {signers[0]: 0, signers[1]: 0, signers[2]: 1}, // adopt-by-intent releases it without a person
		"signer_unsigned_backlog": {signers[0]: 0, signers[1]: 0, signers[2]: 0},
	}
	for i, node := range nodes {
		var got map[string]map[string]float64
		waitFor(t, 10*time.Second, fmt.Sprintf("node %d's scrape to show every signer's condition", i), func() bool {
			got = node.signerGauges(t)
			for metric, bySigner := range want {
				for signer, v := range bySigner {
					if value, ok := got[metric][signer]; !ok || value != v {
						return false
					}
				}
			}
			return true
		})
		ready := node.do(t, http.MethodGet, "/readyz", nil)
		checks, _ := ready.body["checks"].(map[string]any)
		if ready.status != http.StatusOK || ready.body["degraded"] != true || !strings.Contains(fmt.Sprint(checks["signers"]), "2 of 3 signers cannot serve") {
			t.Fatalf("node %d /readyz: %d %s, want ready, degraded, naming 2 of 3 signers", i, ready.status, ready.raw)
		}
	}
}

// signerGauges scrapes /metrics for the per-signer gauges: metric -> signer -> value.
func (s *testService) signerGauges(t *testing.T) map[string]map[string]float64 {
	t.Helper()
	resp, err := s.http.Get(s.httpURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]map[string]float64{}
	scanner := bufio.NewScanner(resp.Body)
	scanner.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for scanner.Scan() {
		line := scanner.Text()
		if !strings.HasPrefix(line, "signer_") {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		_, after, ok := strings.Cut(rest, `signer="`)
		if !ok {
			continue
		}
		signer, _, _ := strings.Cut(after, `"`)
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err != nil {
			continue
		}
		if out[name] == nil {
			out[name] = map[string]float64{}
		}
		out[name][signer] = v
	}
	return out
}
