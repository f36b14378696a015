package feed_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/feed"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// service is one real txmanager-service for the package's tests.
var service *servicetest.Service

func TestMain(m *testing.M) {
	var err error
	if service, err = servicetest.Start("feed"); err != nil {
		if errors.Is(err, servicetest.ErrNoDatabase) && os.Getenv(servicetest.EnvSkip) == "1" {
			fmt.Printf("%s=1: the feed consumer's tests need a real service and did not run: %v\n", servicetest.EnvSkip, err)
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "feed tests: start txmanager-service:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := service.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "feed tests: stop txmanager-service:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// callerDatabase is the caller's own database (found as the service's is): the consumer's
// cursor table and a table of applied completions whose primary key would refuse a second
// application.
func callerDatabase(t *testing.T) (*pgxpool.Pool, txmanager.Manager) {
	t.Helper()
	db, err := servicetest.NewDatabase("feed_caller")
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), db.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if err := db.Drop(); err != nil {
			t.Errorf("drop the caller's database: %v", err)
		}
	})
	for _, ddl := range []string{feed.Schema, "CREATE TABLE applied (tx_id text PRIMARY KEY, status text NOT NULL)"} {
		if _, err := pool.Exec(context.Background(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	component, err := txmanager.NewComponent(txmanager.Config{DefaultTimeout: 30 * time.Second}, pool, log.DefaultLogger)
	if err != nil {
		t.Fatal(err)
	}
	return pool, component.Manager
}

func newClient(t *testing.T) *txmclient.Client {
	t.Helper()
	tlsConfig, err := service.TLSConfig()
	if err != nil {
		t.Fatal(err)
	}
	client, closeClient, err := txmclient.New(context.Background(), txmclient.Config{Endpoints: []string{service.GRPCAddr}, APIKey: service.APIKey, TLS: tlsConfig})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	return client
}

// Consumers of one name, one after another, with a handler that fails once on the way:
// every completion is applied exactly once (the applied table's key would refuse a second
// time), the failed one by the next consumer, and the cursor is stored.
func TestConsumerAppliesEachCompletionOnceAcrossRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, tx := callerDatabase(t)
	client := newClient(t)
	var mu sync.Mutex
	mine := map[string]bool{}
	create := func(from, n int) {
		for i := from; i < from+n; i++ {
			resp, err := client.Create(ctx, &v1.CreateTxRequest{Signer: servicetest.DevSigner, To: servicetest.Recipient, Value: "1", GasLimit: 21000, RequestId: fmt.Sprintf("%s-%d", t.Name(), i)})
			if err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			mine[resp.GetTx().GetTxId()] = true
			mu.Unlock()
		}
	}
	countApplied := func() int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM applied").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	errFailOnce := errors.New("the handler fails once")
	handled, failed := 0, false
	// run consumes until want completions of this test are in the applied table (stopped
	// from outside, between transactions), or until the handler fails.
	run := func(want int) error {
		runCtx, stop := context.WithCancel(ctx)
		defer stop()
		consumer := feed.NewConsumer(client, tx, "test", func(ctx context.Context, s txmanager.Session, c *v1.Completion) error {
			mu.Lock()
			defer mu.Unlock()
			if !mine[c.GetTxId()] {
				return nil
			}
			if handled++; handled == 5 && !failed {
				failed = true
				return errFailOnce
			}
			_, err := s.DB().Exec(ctx, "INSERT INTO applied (tx_id, status) VALUES ($1, $2)", c.GetTxId(), c.GetStatus())
			return err
		})
		consumer.Wait = 2 * time.Second
		done := make(chan error, 1)
		go func() { done <- consumer.Run(runCtx) }()
		for {
			select {
			case err := <-done:
				return err
			case <-time.After(100 * time.Millisecond):
				if countApplied() >= want {
					stop()
				}
			}
		}
	}
	create(0, 6)
	if err := run(6); !errors.Is(err, errFailOnce) {
		t.Fatalf("first consumer ended with %v, want the handler's failure", err)
	}
	if n := countApplied(); n != 4 {
		t.Fatalf("%d completions applied before the failure, want 4 (the fifth failed, the sixth waits behind it)", n)
	}
	if err := run(6); !errors.Is(err, context.Canceled) {
		t.Fatalf("second consumer ended with %v, want its cancellation after 6 completions", err)
	}
	create(6, 3)
	if err := run(9); !errors.Is(err, context.Canceled) {
		t.Fatalf("third consumer ended with %v", err)
	}
	var cursor string
	if err := pool.QueryRow(ctx, "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = 'test'").Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	if n := countApplied(); n != 9 || cursor == "" {
		t.Fatalf("%d completions applied, cursor %q; want all 9 once and the cursor stored", n, cursor)
	}
}

// pages is a feed that serves its pages in turn, then holds the read until the consumer
// stops.
type pages struct {
	mu    sync.Mutex
	pages []*v1.ListCompletionsResponse
	asked []string
}

func (p *pages) ListCompletions(ctx context.Context, after string, _ uint32, _ time.Duration) (*v1.ListCompletionsResponse, error) {
	p.mu.Lock()
	p.asked = append(p.asked, after)
	if len(p.pages) > 0 {
		page := p.pages[0]
		p.pages = p.pages[1:]
		p.mu.Unlock()
		return page, nil
	}
	p.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

// A page's cursor past its last completion (a reader of some signers is moved past the
// others' completions) is stored, so the consumer's cursor keeps up with the feed while its
// own signers are quiet and does not fall behind retention; a cursor behind it never moves
// it back.
func TestConsumerKeepsUpWithThePagesCursor(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, tx := callerDatabase(t)
	feedPages := &pages{pages: []*v1.ListCompletionsResponse{
		{Completions: []*v1.Completion{{TxId: "a", Cursor: "3", Status: "CONFIRMED"}}, Next: "10"},
		{Next: "25"},
		{Next: "7"},
	}}
	var handled []string
	consumer := feed.NewConsumer(feedPages, tx, "filtered", func(_ context.Context, _ txmanager.Session, c *v1.Completion) error {
		handled = append(handled, c.GetTxId())
		return nil
	})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- consumer.Run(runCtx) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		feedPages.mu.Lock()
		asked := len(feedPages.asked)
		feedPages.mu.Unlock()
		if asked == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer asked %d times, want 4", asked)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v", err)
	}
	var cursor string
	if err := pool.QueryRow(ctx, "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = 'filtered'").Scan(&cursor); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(feedPages.asked) != "[ 10 25 25]" || cursor != "25" || fmt.Sprint(handled) != "[a]" {
		t.Fatalf("asked after %q, cursor %q, handled %v; want [ 10 25 25], 25 and [a]", feedPages.asked, cursor, handled)
	}
}
