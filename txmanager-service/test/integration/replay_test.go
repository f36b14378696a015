package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// The writer checks requestIds inside its transaction, and the edge looks one up only for a
// create that failed. A retry of an acknowledged create gets its transaction (200, the same
// txId) while the chain answers and while no endpoint does; a retry with another intent
// gets 409 either way; a new create while no endpoint answers is refused and consumes no
// nonce.
func TestRetriesGetTheirTransactionWhateverHoldsNewCreatesBack(t *testing.T) {
	t.Parallel()
	sim, proxies := proxiedChain(t, 1)
	s := startService(t, serviceOptions{chain: sim, chainQuery: true, configure: throughProxies(proxies, time.Second)})
	signer, to := devAddress(t, 0), devAddress(t, 5)
	intent := func(requestID, value string) map[string]any {
		return map[string]any{"signer": signer, "to": to, "value": value, "gasLimit": 21000, "requestId": requestID}
	}
	original := s.createOK(t, intent("invoice-1", "7"))

	retries := func(t *testing.T) {
		t.Helper()
		cases := []struct {
			name   string
			value  string
			status int
			reason string
		}{
			{name: "same intent", value: "7", status: http.StatusOK},
			{name: "another intent", value: "8", status: http.StatusConflict, reason: "IDEMPOTENCY_CONFLICT"},
		}
		for _, tc := range cases {
			a := s.create(t, intent("invoice-1", tc.value))
			if a.status != tc.status || a.reason() != tc.reason {
				t.Fatalf("retry with %s: %d %s, want %d %s", tc.name, a.status, a.raw, tc.status, tc.reason)
			}
			if tc.status == http.StatusOK && a.tx()["txId"] != original {
				t.Fatalf("retry with %s answered tx %v, want the original %s", tc.name, a.tx()["txId"], original)
			}
		}
	}
	t.Run("chain answering", retries)

	if err := proxies[0].SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	// A new create is refused once the service has seen the endpoint fail. Until then one
	// may still be accepted: with a cached nonce and funds it needs no chain call, and the
	// service sees the failure at its next call, a create's or a background loop's (later
	// on a loaded machine).
	deadline := time.Now().Add(10 * time.Second)
	var accepted int64
	for {
		a := s.create(t, intent("invoice-new-"+time.Now().Format("150405.000000"), "9"))
		if a.status == http.StatusServiceUnavailable && a.reason() == "UNAVAILABLE" {
			break
		}
		if a.status == http.StatusAccepted {
			accepted++
		}
		if time.Now().After(deadline) {
			t.Fatalf("new creates still answered %d %s 10s after the only endpoint began refusing", a.status, a.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if a := s.create(t, intent("invoice-new-after", "9")); a.status != http.StatusServiceUnavailable || a.reason() != "UNAVAILABLE" {
		t.Fatalf("a new create after the service refused one: %d %s, want 503 UNAVAILABLE", a.status, a.raw)
	}
	stored := s.count(t, "SELECT count(*) FROM managed_tx")
	t.Run("no endpoint answering", retries)
	if after := s.count(t, "SELECT count(*) FROM managed_tx"); after != stored {
		t.Fatalf("%d transactions stored after the retries, %d before: a retry consumed a nonce", after, stored)
	}
	if stored != 1+accepted {
		t.Fatalf("%d transactions stored, want %d (the original and the creates accepted before the refusals were noticed)", stored, 1+accepted)
	}
}

// A retry of an acknowledged create whose gas is estimated is looked up before the chain
// is asked: while the only endpoint hangs (and before the service has noticed), the retry
// gets its transaction at once, within a caller deadline far shorter than the chain's, and
// never waits on the estimate.
func TestRetryNeedingEstimationDoesNotWaitOnAHungEndpoint(t *testing.T) {
	t.Parallel()
	const chainDeadline = 5 * time.Second
	sim, proxies := proxiedChain(t, 1)
	s := startService(t, serviceOptions{chain: sim, configure: throughProxies(proxies, chainDeadline)})
	signer, to := devAddress(t, 0), devAddress(t, 5)
	request := &v1.CreateTxRequest{Signer: signer, To: to, Value: "7", RequestId: "invoice-estimated"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	first, err := s.grpc.CreateTx(ctx, request)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		retry, err := s.grpc.CreateTx(ctx, request)
		cancel()
		if err != nil {
			t.Fatalf("retry %d while the endpoint hangs: %v (want the original transaction)", i, err)
		}
		if retry.GetCreated() || retry.GetTx().GetTxId() != first.GetTx().GetTxId() {
			t.Fatalf("retry %d answered tx %s (created %v), want the original %s", i, retry.GetTx().GetTxId(), retry.GetCreated(), first.GetTx().GetTxId())
		}
	}
}
