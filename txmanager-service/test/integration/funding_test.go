package integration

import (
	"encoding/json"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A signer that pays out faster than it holds, watched with funding marks and a treasury, on
// a real chain: its balance falling under the low-water mark fires signer.balance_low once
// per crossing, the treasury refills it up to the high-water mark through the service, the
// balance back at the mark fires signer.balance_recovered, and not one of its creates is
// refused for funds. The events reach a webhook receiver, signed.
func TestLowBalanceFiresOncePerCrossingAndTheTreasuryRefills(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 200*time.Millisecond)
	payerKey := newKey(t)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(payerKey)))
		bc.Create.FundsGaugeInterval = conf.Duration(200 * time.Millisecond)
		bc.Webhooks.PassInterval, bc.Webhooks.Lease = conf.Duration(200*time.Millisecond), conf.Duration(2*time.Second)
		bc.Webhooks.BackoffMin, bc.Webhooks.BackoffMax = conf.Duration(50*time.Millisecond), conf.Duration(500*time.Millisecond)
	}})
	treasury := crypto.PubkeyToAddress(sim.DevKeys()[0].PublicKey).Hex()
	payer := crypto.PubkeyToAddress(payerKey.PublicKey).Hex()
	ether := func(milli int64) string { return new(big.Int).Mul(big.NewInt(milli), big.NewInt(1e15)).String() }

	const secret = "whsec_funding_test_secret"
	var mu sync.Mutex
	var kinds []string
	seen := map[string]bool{}
	badSignatures, repeats := 0, 0
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := domain.VerifyWebhookSignature([]byte(secret), r.Header.Get("Txm-Signature"), body, time.Now(), time.Minute); err != nil {
			badSignatures++
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var e struct{ Kind string }
		_ = json.Unmarshal(body, &e)
		// Delivery is at least once (a subscription taken over, or its lease renewed late on
		// a busy machine, sends again what its cursor had not saved): the receiver applies
		// each event id once, as docs/webhooks.md asks of receivers.
		if id := r.Header.Get("Txm-Event-Id"); seen[id] {
			repeats++
		} else {
			seen[id] = true
			kinds = append(kinds, e.Kind)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	sub, _ := json.Marshal(map[string]any{"url": receiver.URL, "secret": secret, "signers": []string{payer},
		"kinds": []string{domain.EventBalanceLow, domain.EventBalanceRecovered, domain.EventRefillSent}})
	if a := s.do(t, http.MethodPost, "/api/v1/admin/webhooks", sub); a.status != http.StatusOK {
		t.Fatalf("subscribe: %d %s", a.status, a.raw)
	}
	for _, bad := range []map[string]any{
		{"lowWater": ether(500), "highWater": ether(400), "treasury": treasury},
		{"lowWater": "-1", "highWater": ether(400)},
		{"lowWater": ether(500), "highWater": ether(1000), "treasury": payer},
		{"lowWater": ether(500), "highWater": ether(1000), "treasury": "0x12"},
	} {
		body, _ := json.Marshal(bad)
		if a := s.do(t, http.MethodPut, "/api/v1/admin/signers/"+payer+"/funding", body); a.status != http.StatusBadRequest {
			t.Fatalf("funding %v: %d %s, want 400", bad, a.status, a.raw)
		}
	}
	// The low-water mark covers what the payer spends while a refill confirms (about 1 s here).
	marks, _ := json.Marshal(map[string]any{"lowWater": ether(1000), "highWater": ether(2000), "treasury": treasury})
	if a := s.do(t, http.MethodPut, "/api/v1/admin/signers/"+payer+"/funding", marks); a.status != http.StatusOK {
		t.Fatalf("set the funding marks: %d %s", a.status, a.raw)
	}

	// The payer starts with nothing: the first look finds it low and the treasury fills it;
	// the look after the refill landed finds it recovered.
	waitFor(t, time.Minute, "the first refill", func() bool {
		f := s.do(t, http.MethodGet, "/api/v1/admin/signers/"+payer+"/funding", nil)
		return f.body["low"] == false && f.body["refills"] == "1"
	})
	// Then it pays 150 milli-ether every 400 ms: 4.5 ether in all, twice what it can hold.
	refused := 0
	for i := range 30 {
		a := s.create(t, map[string]any{"signer": payer, "to": devAddress(t, 6), "value": ether(150), "gasLimit": 21000, "requestId": "payout-" + string(rune('a'+i))})
		switch {
		case a.status == http.StatusAccepted:
		case a.reason() == "INSUFFICIENT_FUNDS":
			refused++
			t.Logf("payout %d refused: %s", i, a.raw)
		default:
			t.Fatalf("payout %d: %d %s", i, a.status, a.raw)
		}
		time.Sleep(400 * time.Millisecond)
	}
	if refused != 0 {
		t.Fatalf("%d payouts refused for funds while the treasury could pay", refused)
	}
	var funding apiResponse
	waitFor(t, time.Minute, "the payer no longer low", func() bool {
		funding = s.do(t, http.MethodGet, "/api/v1/admin/signers/"+payer+"/funding", nil)
		return funding.body["low"] == false
	})
	waitFor(t, 30*time.Second, "the last recovery delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(kinds) > 0 && kinds[len(kinds)-1] == domain.EventBalanceRecovered
	})
	mu.Lock()
	defer mu.Unlock()
	lows, recovered, refills := 0, 0, 0
	state := "ok"
	for _, k := range kinds {
		switch k {
		case domain.EventBalanceLow:
			if state == "low" {
				t.Fatalf("two balance_low events without a recovery between them: %s", strings.Join(kinds, ", "))
			}
			state, lows = "low", lows+1
		case domain.EventBalanceRecovered:
			if state == "ok" {
				t.Fatalf("a recovery without a low before it: %s", strings.Join(kinds, ", "))
			}
			state, recovered = "ok", recovered+1
		case domain.EventRefillSent:
			refills++
		}
	}
	if lows < 2 || lows != recovered || refills < lows || badSignatures != 0 {
		t.Fatalf("events %s: %d lows, %d recoveries, %d refills, %d bad signatures", strings.Join(kinds, ", "), lows, recovered, refills, badSignatures)
	}
	t.Logf("30 payouts of 0.15 ether from a signer holding at most 2 ether: 0 refused for funds; %d crossings under 1 ether, each fired once (%d low, %d recovered), %d refills from the treasury (funding record: %v refills); %d events delivered again",
		lows, lows, recovered, refills, funding.body["refills"], repeats)
}

// A treasury whose policy sends refills to approvers has one refill waiting, not a new one
// every look; and a refill already on record under the next request id (the marks set anew,
// counting from 0 again, or an answer lost) is recorded as the refill it is, so the next
// one is sent instead of every look failing with IDEMPOTENCY_CONFLICT.
func TestRefillsThroughApprovalsAndMarksSetAnew(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 200*time.Millisecond)
	payerKey := newKey(t)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(payerKey)))
		bc.Create.FundsGaugeInterval = conf.Duration(200 * time.Millisecond)
	}})
	treasury := crypto.PubkeyToAddress(sim.DevKeys()[0].PublicKey).Hex()
	payer := crypto.PubkeyToAddress(payerKey.PublicKey).Hex()
	ether := func(milli int64) string { return new(big.Int).Mul(big.NewInt(milli), big.NewInt(1e15)).String() }
	setMarks := func(low, high int64) {
		t.Helper()
		marks, _ := json.Marshal(map[string]any{"lowWater": ether(low), "highWater": ether(high), "treasury": treasury})
		if a := s.do(t, http.MethodPut, "/api/v1/admin/signers/"+payer+"/funding", marks); a.status != http.StatusOK {
			t.Fatalf("set the funding marks: %d %s", a.status, a.raw)
		}
	}
	refillApprovals := func() int64 {
		return s.count(t, "SELECT count(*) FROM tx_approval WHERE requester = 'service:refill'")
	}

	policy, _ := json.Marshal(map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "0", "approvers": 1, "expiresAfter": "1h"}}})
	if a := s.do(t, http.MethodPut, "/api/v1/admin/policies/signer/"+treasury, policy); a.status != http.StatusOK {
		t.Fatalf("set the treasury's approval policy: %d %s", a.status, a.raw)
	}
	setMarks(1000, 2000)
	waitFor(t, 30*time.Second, "a refill waiting for approval", func() bool { return refillApprovals() >= 1 })
	time.Sleep(3 * time.Second) // fifteen looks at the payer's balance
	if n := refillApprovals(); n != 1 {
		t.Fatalf("%d refills wait for approval after fifteen looks, want 1", n)
	}

	// The approvers turn it down and the approval rule goes: the next refill goes out. Then
	// the marks are set anew, higher, and their count starts from 0 again while refills 1
	// (the rejected one) and 2 are on record for other amounts.
	if _, err := s.pool.Exec(t.Context(), `UPDATE tx_approval SET state = 'REJECTED', final_reason = 'not now', decided_at = now() WHERE requester = 'service:refill'`); err != nil {
		t.Fatal(err)
	}
	if a := s.do(t, http.MethodDelete, "/api/v1/admin/policies/signer/"+treasury, nil); a.status != http.StatusOK && a.status != http.StatusNoContent {
		t.Fatalf("remove the treasury's policy: %d %s", a.status, a.raw)
	}
	waitFor(t, time.Minute, "a refill sent", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE request_id LIKE 'refill-%' AND state = 'CONFIRMED'") >= 1
	})
	if a := s.do(t, http.MethodDelete, "/api/v1/admin/signers/"+payer+"/funding", nil); a.status != http.StatusOK && a.status != http.StatusNoContent {
		t.Fatalf("delete the funding marks: %d %s", a.status, a.raw)
	}
	setMarks(4000, 5000)
	waitFor(t, time.Minute, "a refill under the next request id", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE request_id LIKE 'refill-%' AND state = 'CONFIRMED'") >= 2
	})
}

// A refill is recorded and told to subscribers in one transaction. When its event cannot be
// appended (a trigger in the database refuses the first signer.refill_sent, as a lock
// timeout or the database away would), neither commits, and the next look records the
// refill with its event, whether the signer is still low or the refill has landed by then.
// Recorded alone, the refill stayed in flight with its event lost, and no later look told
// anyone of it.
func TestARefillIsNeverRecordedWithoutItsEvent(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 200*time.Millisecond)
	payerKey := newKey(t)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(payerKey)))
		bc.Create.FundsGaugeInterval = conf.Duration(200 * time.Millisecond)
	}})
	treasury := crypto.PubkeyToAddress(sim.DevKeys()[0].PublicKey).Hex()
	payerAddress := crypto.PubkeyToAddress(payerKey.PublicKey)
	payer := payerAddress.Hex()
	if _, err := s.pool.Exec(t.Context(), `CREATE SEQUENCE refill_event_fault;
		CREATE FUNCTION refuse_first_refill_event() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.kind = 'signer.refill_sent' THEN
				IF nextval('refill_event_fault') = 1 THEN
					RAISE EXCEPTION 'injected: the first refill event cannot be appended';
				END IF;
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_first_refill_event BEFORE INSERT ON service_event FOR EACH ROW EXECUTE FUNCTION refuse_first_refill_event();`); err != nil {
		t.Fatal(err)
	}
	marks, _ := json.Marshal(map[string]any{"lowWater": "1000000000000000000", "highWater": "2000000000000000000", "treasury": treasury})
	if a := s.do(t, http.MethodPut, "/api/v1/admin/signers/"+payer+"/funding", marks); a.status != http.StatusOK {
		t.Fatalf("set the funding marks: %d %s", a.status, a.raw)
	}
	waitFor(t, time.Minute, "the first refill's event", func() bool {
		return s.count(t, "SELECT count(*) FROM service_event WHERE kind = 'signer.refill_sent'") > 0
	})
	var refillTx, eventTx string
	var refills int64
	if err := s.pool.QueryRow(t.Context(), `SELECT m.tx_id::text, f.refills, (SELECT payload->>'txId' FROM service_event WHERE kind = 'signer.refill_sent' ORDER BY position LIMIT 1)
		FROM managed_tx m, signer_funding f WHERE m.request_id = $1 AND f.signer = $2`, domain.RefillRequestID(payerAddress, 1), payer).Scan(&refillTx, &refills, &eventTx); err != nil {
		t.Fatal(err)
	}
	if eventTx != refillTx || refills != 1 {
		t.Fatalf("the refill event names %s and %d refills are recorded; want the first refill, %s, recorded once", eventTx, refills, refillTx)
	}
	if fired := s.count(t, "SELECT last_value FROM refill_event_fault"); fired < 2 {
		t.Fatalf("the trigger saw %d refill events: the injected failure did not happen", fired)
	}
}
