// Command txmanager-service runs the EVM transaction manager.
//
//	txmanager-service [-conf config.yaml]
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
	"os/signal"
	"syscall"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/lingo-utils/pglocal"
	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
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
	// Stop signals are taken from the first moment: Kratos listens for them only once the
	// service serves, and one that came earlier (a deploy's SIGTERM while this node
	// migrated, joined or announced itself) would end the process by the signal's default
	// action, without draining the writer or releasing leases. Such a signal cancels what is
	// under way and stops the service once it exists; after that, Kratos' own handler asks
	// for the same stop.
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	defer cancel()

	logger := telemetry.NewJSONLogger(os.Stdout, log.LevelInfo)
	// Kratos' process-wide logger only carries its own plumbing (the config watcher's
	// shutdown, servers announcing what the banner prints anyway), some of it from
	// goroutines that outlive the call that started them: only its warnings are worth
	// keeping. The service logs through its own logger.
	log.SetLogger(log.NewFilter(logger, log.FilterLevel(log.LevelWarn)))
	bc, err := conf.Load(*confPath)
	if err != nil {
		return err
	}
	if *migrateOnly && bc.Database.DSN == "" && bc.Database.MigrationDSN == "" {
		return fmt.Errorf("-migrate-only needs DATABASE_URL or DATABASE_MIGRATION_URL")
	}
	var listeners *server.Listeners
	if !*migrateOnly {
		// Bound first: a busy port fails the start before a database is started or touched,
		// and the node id may follow a port the kernel picked.
		if listeners, err = app.Listen(bc); err != nil {
			return err
		}
		defer func() { _ = listeners.Close() }()
	}
	nodeLogger := telemetry.NewNodeLogger(logger, bc.Node.ID)
	helper := log.NewHelper(nodeLogger)
	goRuntime := app.ApplyGoRuntime(bc.Runtime)
	helper.Infow(append([]any{"msg", "garbage collector set"}, goRuntime.Fields()...)...)
	// One line once everything this process started has stopped (deferred first, so it
	// runs last): after a Ctrl-C it is the last thing a developer reads.
	var served, throwawayRemoved bool
	defer func() {
		switch {
		case served && throwawayRemoved:
			helper.Infow("msg", "stopped; its throwaway PostgreSQL is removed")
		case served:
			helper.Infow("msg", "stopped")
		}
	}()

	if bc.Database.DSN == "" && !*migrateOnly {
		cluster, err := startLocalDatabase(helper)
		if err != nil {
			return err
		}
		defer func() {
			if err := cluster.Stop(); err != nil {
				helper.Warnw("msg", "stopping the local PostgreSQL", "error", err.Error())
				return
			}
			throwawayRemoved = true
		}()
		bc.Database.DSN = cluster.DSN
	}
	if bc.Database.MigrateOnStart || *migrateOnly {
		dsn := bc.Database.MigrationDSN
		if dsn == "" {
			dsn = bc.Database.DSN
		}
		// An online migration of a large table (concurrent index builds) can take a while;
		// its steps are safe to run again, so a run cut off resumes where it stopped.
		timeout := 10 * time.Minute
		if *migrateOnly {
			timeout = time.Hour
		}
		migrateCtx, cancelMigrate := context.WithTimeout(ctx, timeout)
		applied, err := repositories.Migrate(migrateCtx, dsn, migrations.FS, repositories.MigrateOptions{ConfiguredChainID: configuredChainID(bc)})
		cancelMigrate()
		if err != nil {
			if ctx.Err() != nil {
				return nil // told to stop; a migration cut off resumes at the next start
			}
			return err
		}
		helper.Infow("msg", "database migrated", "applied", applied)
	}
	if *migrateOnly {
		return nil
	}

	if ctx.Err() != nil {
		return nil // told to stop before the service was built
	}
	service, cleanup, err := app.New(bc, listeners, nodeLogger, services.BuildVersion(Version))
	if err != nil {
		return err
	}
	defer cleanup()
	// A stop before Run cancels the app's context: Run then stops as soon as it has
	// started, through the same hooks as any stop.
	stopAfter := context.AfterFunc(ctx, func() { _ = service.Stop() })
	defer stopAfter()
	if err := service.Run(); err != nil {
		if ctx.Err() != nil {
			return nil // told to stop while it started: nothing was served
		}
		return err
	}
	served = true
	return nil
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

// configuredChainID is the chain a database's existing rows belong to when the database
// recorded none (a migration gives them a chain): the one chain the configuration names,
// or 0 when it names none or several.
func configuredChainID(bc *conf.Bootstrap) uint64 {
	switch len(bc.Chains) {
	case 0:
		return bc.Chain.ID
	case 1:
		return bc.Chains[0].ID
	default:
		return 0
	}
}
