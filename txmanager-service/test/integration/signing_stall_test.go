package integration

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// A signer whose key source cannot sign (a real clef behind a proxy that stops answering) is
// held back: its waiting transaction says why, the signer status says since when and why,
// past the bound its creates are refused with 503 SIGNER_UNAVAILABLE and Retry-After with
// nothing allocated, and once the key source answers again the signer serves by itself and
// its transactions confirm. A raw-key signer on the same node is never affected.
func TestSignerThatCannotSignIsHeldBack(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startClefSigner(t, sim.DevKeys()[6], false)
	held := remote.clefAddr.Hex()
	healthy := devAddress(t, 0)
	const maxUnsigned = 8
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.External = conf.ExternalSource{URL: remote.clefProxy.URL(), Addresses: []string{held}, Timeout: conf.Duration(time.Second)}
		bc.Pipeline.SigningStall = conf.SigningStall{MaxUnsigned: maxUnsigned, MaxDuration: conf.Duration(time.Minute)}
	}})
	if err := remote.clefProxy.SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	transfer := func(signer string, value int, requestID string) map[string]any {
		return map[string]any{"signer": signer, "to": devAddress(t, 7), "value": fmt.Sprint(value), "gasLimit": 21000, "requestId": requestID}
	}
	waiting := s.createOK(t, transfer(held, 1, "held-1"))

	// The signature times out: the transaction and the signer status say so.
	waitFor(t, 30*time.Second, "the signer status to show its key source failing", func() bool {
		status := s.do(t, http.MethodGet, "/api/v1/admin/signers/"+held, nil)
		return status.body["signingFailingSince"] != nil && status.body["serving"] != true
	})
	status := s.do(t, http.MethodGet, "/api/v1/admin/signers/"+held, nil)
	if reason, _ := status.body["signingError"].(string); reason == "" || !strings.Contains(status.raw, `"unsigned"`) {
		t.Fatalf("signer status without the key source's error and its unsigned backlog: %s", status.raw)
	}
	tx := s.do(t, http.MethodGet, "/api/v1/tx/"+waiting, nil)
	if tx.body["state"] != "ALLOCATED" || tx.body["subState"] != "SIGNING_FAILED" || !strings.Contains(fmt.Sprint(tx.body["lastError"]), "key source") {
		t.Fatalf("the waiting transaction: %s, want ALLOCATED/SIGNING_FAILED with the key source's error", tx.raw)
	}
	if strings.Contains(tx.raw, remote.clefProxy.URL()) && strings.Contains(remote.clefProxy.URL(), "@") {
		t.Fatalf("the transaction's error shows the key source's credentials: %s", tx.raw)
	}

	// More creates are taken until the bound; then they are refused and allocate nothing.
	accepted := 1
	var refused apiResponse
	for i := 2; i < 4*maxUnsigned; i++ {
		got := s.create(t, transfer(held, i, fmt.Sprintf("held-%d", i)))
		if got.status == http.StatusAccepted {
			accepted++
			continue
		}
		refused = got
		if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE request_id = $1", fmt.Sprintf("held-%d", i)); n != 0 {
			t.Fatalf("a refused create left %d rows", n)
		}
		break
	}
	requireAlertAnswer(t, "TxmSignerCannotSign", refused)
	if accepted > maxUnsigned {
		t.Fatalf("%d creates accepted for a signer that cannot sign, the bound is %d", accepted, maxUnsigned)
	}
	if next := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", held); next != int64(accepted) {
		t.Fatalf("cursor at %d after %d accepted creates: a refusal consumed a nonce", next, accepted)
	}
	if got := s.metricSumsWhere(t, `signer="`+held+`"`)["signer_signing_failing"]; got != 1 {
		t.Fatalf("signer_signing_failing for the held signer = %v, want 1", got)
	}
	// While it fails, one signature at a time is asked of it: a throttled or dead key source
	// is not sent a batch's worth of calls every pass (each hangs here for its 1 s timeout).
	before := remote.clefProxy.Requests()
	time.Sleep(3 * time.Second)
	if n := remote.clefProxy.Requests() - before; n > 6 {
		t.Fatalf("%d requests reached the failing key source in 3 s with %d transactions waiting, want about one a pass", n, accepted)
	}

	// The raw-key signer is not held back.
	other := s.createOK(t, transfer(healthy, 1, "healthy-1"))
	waitFor(t, 30*time.Second, "the raw-key signer's transaction confirmed", func() bool { return s.tx(t, other).state == "CONFIRMED" })

	// The key source answers again: the signer serves by itself, its waiting transactions go out.
	if err := remote.clefProxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "the held signer's transactions confirmed once its key source answers", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'", held) == int64(accepted)
	})
	var again apiResponse
	waitFor(t, 30*time.Second, "creates for the signer accepted again", func() bool {
		again = s.create(t, transfer(held, 1000, "held-after"))
		return again.status == http.StatusAccepted
	})
	status = s.do(t, http.MethodGet, "/api/v1/admin/signers/"+held, nil)
	if status.body["signingFailingSince"] != nil || status.body["serving"] != true {
		t.Fatalf("signer status after the key source came back: %s", status.raw)
	}
	if got := s.metricSumsWhere(t, `signer="`+held+`"`)["signer_signing_failing"]; got != 0 {
		t.Fatalf("signer_signing_failing after recovery = %v, want 0", got)
	}
}
