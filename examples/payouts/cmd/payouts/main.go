// Command payouts is the reference service that calls txmanager-service from Kratos: an
// HTTP API that accepts payouts into an outbox, a relay that hands them to txmanager with
// the outbox row id as requestId, and a consumer of txmanager's completions feed that
// marks them PAID or FAILED exactly once.
//
//	DATABASE_URL=postgres://... TXMANAGER_ADDR=127.0.0.1:9090 PAYOUTS_SIGNER=0x... \
//	  payouts -conf configs/config.yaml
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/server"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/workers"
)

func main() {
	confPath := flag.String("conf", "configs/config.yaml", "configuration file")
	flag.Parse()
	logger := log.With(log.NewStdLogger(os.Stdout), "ts", log.DefaultTimestamp, "service", "payouts")
	if err := run(*confPath, logger); err != nil {
		fmt.Fprintln(os.Stderr, "payouts:", err)
		os.Exit(1)
	}
}

func run(confPath string, logger log.Logger) error {
	bc, err := conf.Load(confPath)
	if err != nil {
		return err
	}
	app, cleanup, err := wireApp(bc, logger)
	if err != nil {
		return err
	}
	defer cleanup()
	return app.Run()
}

// newApp migrates the database before anything serves, then runs the HTTP API, the relay
// and the consumer together.
func newApp(logger log.Logger, httpServer *server.HTTPServer, relay *workers.RelayWorker, consumer *workers.ConsumerWorker, migrator *repositories.Migrator) *kratos.App {
	helper := log.NewHelper(logger)
	return kratos.New(
		kratos.Name("payouts"),
		kratos.Logger(logger),
		kratos.Server(httpServer, relay, consumer),
		kratos.StopTimeout(20*time.Second),
		kratos.BeforeStart(func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			return migrator.Migrate(ctx)
		}),
		kratos.AfterStart(func(context.Context) error {
			// Machine-readable: tools start the service on port 0 and read the port here.
			helper.Infow("msg", "serving", "http_addr", httpServer.Addr)
			return nil
		}),
	)
}
