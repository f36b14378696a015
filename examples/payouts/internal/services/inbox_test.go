package services_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/feed"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/testsupport"
)

// consumeUntil runs a consumer (named "payouts") with handler until done reports true,
// and returns the error Run ended with if it ended on its own first.
func consumeUntil(t *testing.T, client *txmclient.Client, db testsupport.Database, handler feed.Handler, done func() bool) error {
	t.Helper()
	consumer := feed.NewConsumer(client, db.Tx, "payouts", handler)
	consumer.Wait = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	result := make(chan error, 1)
	go func() { result <- consumer.Run(ctx) }()
	for {
		select {
		case err := <-result:
			return err
		case <-time.After(100 * time.Millisecond):
		}
		if done() {
			cancel()
			if err := <-result; err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		if ctx.Err() != nil {
			t.Fatal("consumer: timed out")
		}
	}
}

func cursor(t *testing.T, db testsupport.Database) string {
	t.Helper()
	var c string
	_ = db.Pool.QueryRow(context.Background(), "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = 'payouts'").Scan(&c)
	return c
}

// Seed 004 section 12: a completion applied in the transaction that moves the cursor is
// applied once, even when the process dies between the handler and the commit: the
// cursor does not move on failure and the next run applies the completion again, once.
func TestConsumerAppliesEachCompletionOnceAcrossCrash(t *testing.T) {
	db := testsupport.NewDatabase(t)
	tm := testsupport.StartTxManager(t)
	client := newClient(t, tm)
	const payouts = 3
	createPayouts(t, db, payouts)
	relay := services.NewRelay(db.Tx, repositories.NewOutboxRepository(), repositories.NewPayoutRepository(), client, testsupport.DevSigner, relayConfig(10), logger)
	if res, err := relayUntilEmpty(context.Background(), relay); err != nil || res.Sent != payouts {
		t.Fatalf("relay: %+v, %v", res, err)
	}
	applier := services.NewCompletionApplier(repositories.NewPayoutRepository(), client, testsupport.DevSigner, logger)

	var calls atomic.Int32
	crashOnce := func(ctx context.Context, s txmanager.Session, c *v1.Completion) error {
		if err := applier.Apply(ctx, s, c); err != nil {
			return err
		}
		if calls.Add(1) == 1 {
			return errInjected // the handler's writes are done; the commit never happens
		}
		return nil
	}
	err := consumeUntil(t, client, db, crashOnce, func() bool { return false })
	if !errors.Is(err, errInjected) {
		t.Fatalf("consumer ended with %v, want the injected crash", err)
	}
	if c := cursor(t, db); c != "" {
		t.Fatalf("cursor moved to %q after a failed completion", c)
	}
	if n := count(t, db, "SELECT count(*) FROM payout_completions"); n != 0 {
		t.Fatalf("%d completions recorded by a rolled-back handler", n)
	}
	if n := count(t, db, "SELECT count(*) FROM payouts WHERE status = 'SUBMITTED'"); n != payouts {
		t.Fatalf("%d payouts SUBMITTED after the crash, want %d", n, payouts)
	}

	allPaid := func() bool { return count(t, db, "SELECT count(*) FROM payouts WHERE status = 'PAID'") == payouts }
	if err := consumeUntil(t, client, db, crashOnce, allPaid); err != nil {
		t.Fatalf("consumer after restart: %v", err)
	}
	if n := count(t, db, "SELECT count(*) FROM payout_completions"); n != payouts {
		t.Fatalf("%d completions applied, want %d", n, payouts)
	}
	if n := count(t, db, "SELECT count(*) FROM payouts WHERE status = 'PAID' AND tx_hash LIKE '0x%'"); n != payouts {
		t.Fatalf("%d payouts PAID with a tx hash, want %d", n, payouts)
	}
	// A restarted consumer resumes after its cursor: nothing is applied a second time (the
	// inbox's primary key would fail the handler if it were).
	applied := calls.Load()
	restart := cursor(t, db)
	if err := consumeUntil(t, client, db, crashOnce, func() bool { return true }); err != nil {
		t.Fatalf("consumer restart: %v", err)
	}
	if calls.Load() != applied || cursor(t, db) != restart {
		t.Fatalf("a restarted consumer applied %d completions again", calls.Load()-applied)
	}
}

// A completion that overtakes the relay (the relay sent, then died before recording the
// transaction) still finds its payout, through the requestId; the relay's later replay
// records the same transaction and leaves the payout PAID.
func TestConsumerFinalizesPayoutTheRelayNeverRecorded(t *testing.T) {
	db := testsupport.NewDatabase(t)
	tm := testsupport.StartTxManager(t)
	client := newClient(t, tm)
	ids := createPayouts(t, db, 1)
	outbox := &failingOutbox{OutboxRepository: repositories.NewOutboxRepository()}
	outbox.failMarkSent.Store(1)
	relay := services.NewRelay(db.Tx, outbox, repositories.NewPayoutRepository(), client, testsupport.DevSigner, relayConfig(10), logger)
	if _, err := relay.RelayBatch(context.Background()); !errors.Is(err, errInjected) {
		t.Fatalf("relay: err = %v, want the injected crash", err)
	}
	applier := services.NewCompletionApplier(repositories.NewPayoutRepository(), client, testsupport.DevSigner, logger)
	paid := func() bool {
		return count(t, db, "SELECT count(*) FROM payouts WHERE status = 'PAID' AND tx_id IS NOT NULL") == 1
	}
	if err := consumeUntil(t, client, db, applier.Apply, paid); err != nil {
		t.Fatal(err)
	}
	res, err := relayUntilEmpty(context.Background(), relay)
	if err != nil || res.Replayed != 1 {
		t.Fatalf("relay after restart: %+v, %v; want one replay", res, err)
	}
	var status string
	if err := db.Pool.QueryRow(context.Background(), "SELECT status FROM payouts WHERE id = $1", ids[0]).Scan(&status); err != nil || status != "PAID" {
		t.Fatalf("payout status %q (%v) after the replay, want PAID", status, err)
	}
}
