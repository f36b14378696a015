// Package workers runs the payouts service's background loops as Kratos servers, so the
// app starts and stops them with the HTTP server: the outbox relay and the completions
// consumer.
package workers

import (
	"context"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"

	"github.com/bionicotaku/lingo-utils/txmanager"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/feed"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
)

// ProviderSet builds the loops.
var ProviderSet = wire.NewSet(NewRelayWorker, NewConsumerWorker)

// loop is a goroutine owned by a Kratos server: Start runs it until Stop (or the app's
// context) ends it, and Stop waits until it has returned.
type loop struct {
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

func newLoop() loop { return loop{stop: make(chan struct{}), done: make(chan struct{})} }

// run calls body with a context cancelled by Stop or by ctx.
func (l *loop) run(ctx context.Context, body func(ctx context.Context)) error {
	defer close(l.done)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-l.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	body(ctx)
	return nil
}

func (l *loop) halt(ctx context.Context) error {
	l.once.Do(func() { close(l.stop) })
	select {
	case <-l.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// RelayWorker runs the relay: batch after batch while rows are due, then a pause.
type RelayWorker struct {
	loop
	relay    *services.Relay
	interval time.Duration
	log      *log.Helper
}

// NewRelayWorker builds the loop.
func NewRelayWorker(relay *services.Relay, bc *conf.Bootstrap, logger log.Logger) *RelayWorker {
	return &RelayWorker{loop: newLoop(), relay: relay, interval: bc.Relay.Interval.Std(),
		log: log.NewHelper(log.With(logger, "component", "relay"))}
}

// Start relays until stopped.
func (w *RelayWorker) Start(ctx context.Context) error {
	return w.run(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			res, err := w.relay.RelayBatch(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				w.log.Errorw("msg", "relay batch failed; its rows stay due", "error", err.Error())
				sleep(ctx, w.interval)
			case res.Claimed() == 0:
				sleep(ctx, w.interval)
			}
		}
	})
}

// Stop ends the loop; a batch in flight is rolled back and replayed by the next start.
func (w *RelayWorker) Stop(ctx context.Context) error { return w.halt(ctx) }

// ConsumerWorker runs feed.Consumer with the completion applier as its handler.
type ConsumerWorker struct {
	loop
	consumer *feed.Consumer
	backoff  time.Duration
	log      *log.Helper
}

// NewConsumerWorker builds the consumer over the service's database.
func NewConsumerWorker(client *txmclient.Client, tx txmanager.Manager, applier *services.CompletionApplier, bc *conf.Bootstrap, logger log.Logger) *ConsumerWorker {
	consumer := feed.NewConsumer(client, tx, bc.Consumer.Name, applier.Apply)
	consumer.Wait, consumer.Page = bc.Consumer.Wait.Std(), bc.Consumer.Page
	return &ConsumerWorker{loop: newLoop(), consumer: consumer, backoff: bc.Consumer.RestartBackoff.Std(),
		log: log.NewHelper(log.With(logger, "component", "consumer"))}
}

// Start consumes until stopped. Run returns when a completion could not be applied (its
// cursor did not move); reading again from the cursor retries exactly that completion.
func (w *ConsumerWorker) Start(ctx context.Context) error {
	return w.run(ctx, func(ctx context.Context) {
		for ctx.Err() == nil {
			if err := w.consumer.Run(ctx); err != nil && ctx.Err() == nil {
				w.log.Errorw("msg", "consumer stopped; resuming from its cursor", "error", err.Error())
				sleep(ctx, w.backoff)
			}
		}
	})
}

// Stop ends the loop.
func (w *ConsumerWorker) Stop(ctx context.Context) error { return w.halt(ctx) }
