// Command txmanager-service runs the EVM transaction manager.
//
//	txmanager-service [-conf configs/config.yaml]
//
// Without -conf it runs on the embedded defaults: with no DATABASE_URL it starts a
// throwaway local PostgreSQL, and with no CHAIN_RPC_URL an embedded simulated chain, so a
// fresh machine needs nothing else.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	khttp "github.com/go-kratos/kratos/v2/transport/http"

	"github.com/bionicotaku/lingo-utils/pglocal"
	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
)

// Version is set at build time.
var Version = "dev"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "txmanager-service:", err)
		os.Exit(1)
	}
}

func run() error {
	confPath := flag.String("conf", "", "configuration file (default: the embedded defaults)")
	migrateOnly := flag.Bool("migrate-only", false, "apply the database migrations and exit")
	flag.Parse()

	logger := telemetry.NewJSONLogger(os.Stdout, log.LevelInfo)
	// Kratos' config package logs its own watcher plumbing at info level; only its
	// warnings are worth keeping while the configuration loads.
	log.SetLogger(log.NewFilter(logger, log.FilterLevel(log.LevelWarn)))
	bc, err := conf.Load(*confPath)
	if err != nil {
		return err
	}
	log.SetLogger(logger)
	if *migrateOnly && bc.Database.DSN == "" && bc.Database.MigrationDSN == "" {
		return fmt.Errorf("-migrate-only needs DATABASE_URL or DATABASE_MIGRATION_URL")
	}
	var listeners *server.Listeners
	if !*migrateOnly {
		// Bound first: a busy port fails the start before a database is started or touched,
		// and the node id may follow a port the kernel picked.
		if listeners, err = server.Listen(bc); err != nil {
			return err
		}
		defer listeners.Close()
	}
	nodeLogger := telemetry.NewNodeLogger(logger, bc.Node.ID)
	helper := log.NewHelper(nodeLogger)

	if bc.Database.DSN == "" && !*migrateOnly {
		cluster, err := startLocalDatabase(helper)
		if err != nil {
			return err
		}
		defer cluster.Stop()
		bc.Database.DSN = cluster.DSN
	}
	if bc.Database.MigrateOnStart || *migrateOnly {
		dsn := bc.Database.MigrationDSN
		if dsn == "" {
			dsn = bc.Database.DSN
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		applied, err := repositories.Migrate(ctx, dsn, migrations.FS)
		cancel()
		if err != nil {
			return err
		}
		helper.Infow("msg", "database migrated", "applied", applied)
	}
	if *migrateOnly {
		return nil
	}

	app, cleanup, err := wireApp(bc, listeners, nodeLogger)
	if err != nil {
		return err
	}
	defer cleanup()
	return app.Run()
}

// startLocalDatabase starts a throwaway PostgreSQL for development; it lives as long as
// this process and is removed when it stops.
func startLocalDatabase(helper *log.Helper) (*pglocal.Cluster, error) {
	helper.Infow("msg", "DATABASE_URL not set: starting a throwaway local PostgreSQL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{})
	if err != nil {
		return nil, fmt.Errorf("no DATABASE_URL and no local PostgreSQL could be started (install the Debian package `postgresql`, or set DATABASE_URL): %w", err)
	}
	return cluster, nil
}

// newApp assembles the process: servers plus the background loops, started before the
// servers accept requests and stopped after they stop, in the order that loses nothing:
// stop intake, flush the writer, release leases.
func newApp(bc *conf.Bootstrap, logger log.Logger, hs *khttp.Server, gs *kgrpc.Server, writer *workers.TransactionWriter,
	keeper *workers.LeaseKeeper, pipeline *workers.PipelineWorkers, heartbeat *workers.NodeHeartbeat, nodes *services.NodeRegistry,
	leases *services.LeaseManager, banner *Banner) *kratos.App {
	helper := log.NewHelper(logger)
	// No kratos.Logger option: it would replace Kratos' process-wide logger, which main sets
	// once; several instances in one process (the tests) must not race on it.
	return kratos.New(
		kratos.ID(bc.Node.ID),
		kratos.Name("txmanager-service"),
		kratos.Version(Version),
		kratos.Server(hs, gs),
		kratos.BeforeStart(func(ctx context.Context) error {
			// Registered before serving, so peers can forward to this node at once.
			nodes.Heartbeat(ctx)
			heartbeat.Start(ctx)
			writer.Start(ctx)
			keeper.Start(ctx)
			if bc.Pipeline.Enabled {
				pipeline.Start(ctx)
			}
			return nil
		}),
		kratos.AfterStart(func(context.Context) error {
			banner.Print(os.Stdout)
			return nil
		}),
		kratos.AfterStop(func(ctx context.Context) error {
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			heartbeat.Stop()
			if err := nodes.Leave(flushCtx); err != nil {
				helper.Warnw("msg", "leaving the node registry", "error", err.Error())
			}
			writer.Stop(flushCtx)
			pipeline.Stop()
			keeper.Stop()
			if err := leases.ReleaseAll(flushCtx); err != nil {
				helper.Warnw("msg", "releasing leases on shutdown", "error", err.Error())
			}
			return nil
		}),
	)
}
