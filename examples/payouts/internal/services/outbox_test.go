package services_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/google/uuid"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/testsupport"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var logger = log.NewStdLogger(os.Stderr)

// failingOutbox fails (or panics in) the calls the test chooses, to put a crash at an
// exact point of a transaction.
type failingOutbox struct {
	*repositories.OutboxRepository
	failEnqueue  error
	panicEnqueue bool
	// failMarkSent fails this many MarkSent calls: the relay's send happened, the commit
	// that records it does not, as when the process dies in between.
	failMarkSent atomic.Int32
}

var errInjected = errors.New("injected failure")

func (f *failingOutbox) Enqueue(ctx context.Context, s txmanager.Session, payoutID uuid.UUID) (uuid.UUID, error) {
	if f.panicEnqueue {
		panic("injected panic")
	}
	if f.failEnqueue != nil {
		return uuid.Nil, f.failEnqueue
	}
	return f.OutboxRepository.Enqueue(ctx, s, payoutID)
}

func (f *failingOutbox) MarkSent(ctx context.Context, s txmanager.Session, id uuid.UUID, note string) error {
	if f.failMarkSent.Add(-1) >= 0 {
		return errInjected
	}
	return f.OutboxRepository.MarkSent(ctx, s, id, note)
}

func newPayout(t *testing.T, amount string) domain.NewPayout {
	t.Helper()
	p, err := domain.ParseNewPayout(testsupport.Recipient, amount, "")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func count(t *testing.T, db testsupport.Database, query string, args ...any) int {
	t.Helper()
	var n int
	if err := db.Pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// Seed 004 section 11: the business row and its outbox row commit together or not at all.
func TestCreateCommitsPayoutAndOutboxTogether(t *testing.T) {
	tests := []struct {
		name       string
		outbox     *failingOutbox
		wantRows   int
		wantErr    error
		wantPanics bool
	}{
		{name: "both commit", outbox: &failingOutbox{}, wantRows: 1},
		{name: "outbox insert fails: neither", outbox: &failingOutbox{failEnqueue: errInjected}, wantErr: errInjected},
		{name: "panic after the payout insert: neither", outbox: &failingOutbox{panicEnqueue: true}, wantPanics: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := testsupport.NewDatabase(t)
			tt.outbox.OutboxRepository = repositories.NewOutboxRepository()
			svc := services.NewPayoutService(db.Tx, repositories.NewPayoutRepository(), tt.outbox)
			var err error
			panicked := func() (panicked bool) {
				defer func() { panicked = recover() != nil }()
				_, _, err = svc.Create(context.Background(), newPayout(t, "1000"))
				return false
			}()
			if panicked != tt.wantPanics {
				t.Fatalf("panicked = %t, want %t", panicked, tt.wantPanics)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr == nil && !tt.wantPanics && err != nil {
				t.Fatalf("create: %v", err)
			}
			payouts := count(t, db, "SELECT count(*) FROM payouts")
			outbox := count(t, db, "SELECT count(*) FROM payout_outbox")
			if payouts != tt.wantRows || outbox != tt.wantRows {
				t.Fatalf("payouts = %d, outbox rows = %d, want %d of each", payouts, outbox, tt.wantRows)
			}
		})
	}
}

// sendLog records every CreateTx the relay's client sends and every answer, through the
// client's middleware: the real service deduplicates by requestId, so only the client side
// can show whether the relay sent a row twice.
type sendLog struct {
	mu      sync.Mutex
	sends   map[string]int    // requestId -> CreateTx calls
	created map[string]int    // requestId -> answers with created=true
	txIDs   map[string]string // requestId -> tx id answered
}

func newSendLog() *sendLog {
	return &sendLog{sends: map[string]int{}, created: map[string]int{}, txIDs: map[string]string{}}
}

func (l *sendLog) middleware(next middleware.Handler) middleware.Handler {
	return func(ctx context.Context, req any) (any, error) {
		create, isCreate := req.(*v1.CreateTxRequest)
		if isCreate {
			l.mu.Lock()
			l.sends[create.GetRequestId()]++
			l.mu.Unlock()
		}
		reply, err := next(ctx, req)
		if resp, ok := reply.(*v1.CreateTxResponse); ok && err == nil && isCreate {
			l.mu.Lock()
			if resp.GetCreated() {
				l.created[create.GetRequestId()]++
			}
			if prev, seen := l.txIDs[create.GetRequestId()]; seen && prev != resp.GetTx().GetTxId() {
				l.txIDs[create.GetRequestId()] = "CONFLICT " + prev + " " + resp.GetTx().GetTxId()
			} else {
				l.txIDs[create.GetRequestId()] = resp.GetTx().GetTxId()
			}
			l.mu.Unlock()
		}
		return reply, err
	}
}

func newClient(t *testing.T, tm *testsupport.TxManager, mw ...middleware.Middleware) *txmclient.Client {
	t.Helper()
	client, cleanup, err := txmclient.New(context.Background(), txmclient.Config{Endpoints: []string{tm.GRPCAddr}, Middleware: mw})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return client
}

func relayConfig(batch int) services.RelayConfig {
	return services.RelayConfig{BatchSize: batch, ParallelSends: 4, SendTimeout: 10 * time.Second, RetryBackoff: time.Second, MaxBackoff: time.Second}
}

func createPayouts(t *testing.T, db testsupport.Database, n int) []uuid.UUID {
	t.Helper()
	svc := services.NewPayoutService(db.Tx, repositories.NewPayoutRepository(), repositories.NewOutboxRepository())
	ids := make([]uuid.UUID, n)
	for i := range ids {
		p, _, err := svc.Create(context.Background(), newPayout(t, fmt.Sprint(1000+i)))
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = p.ID
	}
	return ids
}

// relayUntilEmpty runs batches until one finds nothing due.
func relayUntilEmpty(ctx context.Context, r *services.Relay) (services.RelayResult, error) {
	var total services.RelayResult
	for {
		res, err := r.RelayBatch(ctx)
		if err != nil {
			return total, err
		}
		if res.Claimed() == 0 {
			return total, nil
		}
		total.Sent += res.Sent
		total.Replayed += res.Replayed
		total.Rejected += res.Rejected
		total.Deferred += res.Deferred
	}
}

// Seed 004 section 11: two relays at once (two instances of the service) send every outbox
// row exactly once: the rows a relay holds are skipped by the other.
func TestRelaySendsEachRowOnceWithTwoRelays(t *testing.T) {
	db := testsupport.NewDatabase(t)
	tm := testsupport.StartTxManager(t)
	const payouts = 40
	ids := createPayouts(t, db, payouts)
	sends := newSendLog()
	client := newClient(t, tm, sends.middleware)
	relays := make([]*services.Relay, 2)
	for i := range relays {
		relays[i] = services.NewRelay(db.Tx, repositories.NewOutboxRepository(), repositories.NewPayoutRepository(),
			client, testsupport.DevSigner, relayConfig(5), logger)
	}
	results := make([]services.RelayResult, len(relays))
	errs := make([]error, len(relays))
	var wg sync.WaitGroup
	for i, r := range relays {
		wg.Go(func() { results[i], errs[i] = relayUntilEmpty(context.Background(), r) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	t.Logf("relay 1 sent %d, relay 2 sent %d", results[0].Sent, results[1].Sent)
	if got := results[0].Sent + results[1].Sent; got != payouts {
		t.Fatalf("sent %d in all, want %d", got, payouts)
	}
	if len(sends.sends) != payouts {
		t.Fatalf("%d distinct requestIds sent, want %d", len(sends.sends), payouts)
	}
	for requestID, n := range sends.sends {
		if n != 1 || sends.created[requestID] != 1 {
			t.Errorf("requestId %s: sent %d times, created %d times; want once each", requestID, n, sends.created[requestID])
		}
	}
	if n := count(t, db, "SELECT count(DISTINCT tx_id) FROM payouts WHERE status = 'SUBMITTED' AND id = ANY($1)", ids); n != payouts {
		t.Fatalf("%d payouts SUBMITTED with distinct transactions, want %d", n, payouts)
	}
	if n := count(t, db, "SELECT count(*) FROM payout_outbox WHERE sent_at IS NULL"); n != 0 {
		t.Fatalf("%d outbox rows unsent", n)
	}
}

// Seed 004 section 11: a crash after the send and before the commit that marks the row
// sent leaves the row due; the re-send is a replay and creates no second transaction.
func TestRelayReplayAfterCrashCreatesNoSecondTransaction(t *testing.T) {
	db := testsupport.NewDatabase(t)
	tm := testsupport.StartTxManager(t)
	ids := createPayouts(t, db, 3)
	sends := newSendLog()
	client := newClient(t, tm, sends.middleware)
	outbox := &failingOutbox{OutboxRepository: repositories.NewOutboxRepository()}
	outbox.failMarkSent.Store(1)
	relay := services.NewRelay(db.Tx, outbox, repositories.NewPayoutRepository(), client, testsupport.DevSigner, relayConfig(10), logger)

	if _, err := relay.RelayBatch(context.Background()); !errors.Is(err, errInjected) {
		t.Fatalf("first batch: err = %v, want the injected crash", err)
	}
	if n := count(t, db, "SELECT count(*) FROM payouts WHERE status = 'PENDING' AND tx_id IS NULL"); n != 3 {
		t.Fatalf("after the crash %d payouts PENDING without a transaction, want 3 (nothing recorded)", n)
	}
	if n := count(t, db, "SELECT count(*) FROM payout_outbox WHERE sent_at IS NULL"); n != 3 {
		t.Fatalf("after the crash %d outbox rows unsent, want 3", n)
	}
	res, err := relayUntilEmpty(context.Background(), relay)
	if err != nil {
		t.Fatal(err)
	}
	if res.Sent != 3 || res.Replayed != 3 {
		t.Fatalf("after restart: %+v, want 3 sent, all 3 replays", res)
	}
	for requestID, n := range sends.sends {
		if n != 2 || sends.created[requestID] != 1 {
			t.Errorf("requestId %s: sent %d times, created %d times; want 2 sends, 1 transaction", requestID, n, sends.created[requestID])
		}
	}
	for _, id := range ids {
		var txID, requestID string
		err := db.Pool.QueryRow(context.Background(),
			"SELECT p.tx_id, o.id::text FROM payouts p JOIN payout_outbox o ON o.payout_id = p.id WHERE p.id = $1", id).Scan(&txID, &requestID)
		if err != nil {
			t.Fatal(err)
		}
		if sends.txIDs[requestID] != txID {
			t.Errorf("payout %s holds tx %s, txmanager answered %s", id, txID, sends.txIDs[requestID])
		}
		tx, err := client.GetByRequest(context.Background(), testsupport.DevSigner, requestID)
		if err != nil || tx.GetTxId() != txID {
			t.Errorf("txmanager's tx for request %s = %s (%v), want %s", requestID, tx.GetTxId(), err, txID)
		}
	}
}
