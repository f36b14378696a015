package app

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	khttp "github.com/go-kratos/kratos/v2/transport/http"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/workers"
)

// newApp assembles the process: servers plus the background loops, started before the
// servers accept requests and stopped after they stop, in the order that loses nothing:
// stop intake, flush the writer, release leases.
func newApp(bc *conf.Bootstrap, logger log.Logger, hs *khttp.Server, gs *kgrpc.Server, chains ChainStacks,
	heartbeat *workers.NodeHeartbeat, nodes *services.NodeRegistry, feed *workers.FeedSequencerLoop, retention *workers.RetentionLoop,
	roster *services.SignerRoster, rosterLoop *workers.RosterLoop, approvals *workers.ApprovalLoop, webhooks *workers.WebhookLoop,
	banner *Banner, streams *server.Streams, version services.BuildVersion) *kratos.App {
	helper := log.NewHelper(logger)
	// No kratos.Logger option: it would replace Kratos' process-wide logger, which main sets
	// once; several instances in one process (the tests) must not race on it.
	var app *kratos.App
	app = kratos.New(
		kratos.ID(bc.Node.ID),
		kratos.Name("txmanager-service"),
		kratos.Version(string(version)),
		kratos.Server(hs, gs),
		kratos.BeforeStart(func(ctx context.Context) error {
			// Registered before serving, so peers can forward to this node at once; a node
			// id another live process uses is refused here, before anything is written.
			if err := nodes.Join(ctx); err != nil {
				return err
			}
			go func() {
				// Another process took this node id over (this one was paused or cut off past
				// the node timeout): this one stops serving.
				select {
				case err := <-nodes.Conflicts():
					helper.Errorw("msg", "stopping: another process serves under this node id", "error", err.Error())
					_ = app.Stop()
				case <-ctx.Done():
				}
			}()
			// The roster is applied before anything is served: a signer retired while this
			// node was down is refused from the first request (the writer's batch would refuse
			// it anyway), and one added meanwhile is served.
			if err := roster.Join(ctx); err != nil {
				return err
			}
			rosterLoop.Start(ctx)
			heartbeat.Start(ctx)
			// The feed is positioned by every node, whatever its pipeline does.
			feed.Start(ctx)
			retention.Start(ctx)
			approvals.Start(ctx)
			webhooks.Start(ctx)
			for _, chain := range chains {
				chain.Writer.Start(ctx)
				chain.Keeper.Start(ctx)
				chain.Funds.Start(ctx)
				chain.Funding.Start(ctx)
				chain.Funds.Wake()
				if bc.Pipeline.Enabled {
					chain.Pipeline.Start(ctx)
				}
			}
			return nil
		}),
		kratos.AfterStart(func(context.Context) error {
			// The addresses really bound (port 0 gets one from the kernel), machine-readable:
			// the e2e and chaos tools start the service on port 0 and read them here.
			helper.Infow("msg", "serving", "http_addr", bc.Server.HTTP.Addr, "grpc_addr", bc.Server.GRPC.Addr)
			banner.Print(os.Stdout)
			return nil
		}),
		// Open streams end first: gRPC's graceful stop waits for every call, and a watcher's
		// stream would never end by itself.
		kratos.BeforeStop(func(context.Context) error {
			streams.Close()
			return nil
		}),
		kratos.AfterStop(func(ctx context.Context) error {
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			heartbeat.Stop()
			rosterLoop.Stop()
			// Before the writers flush: no approved intent is sent to a writer that stops.
			approvals.Stop()
			webhooks.Stop(flushCtx)
			if err := nodes.Leave(flushCtx); err != nil {
				helper.Warnw("msg", "leaving the node registry", "error", err.Error())
			}
			// Each chain flushes its writer before its leases go; the chains stop side by
			// side, so one chain whose database writes are slow costs the others nothing.
			var wg sync.WaitGroup
			for _, chain := range chains {
				wg.Go(func() {
					chain.Writer.Stop(flushCtx)
					chain.Pipeline.Stop()
					chain.Funds.Stop()
					chain.Funding.Stop()
					chain.Keeper.Stop()
					if err := chain.Leases.ReleaseAll(flushCtx); err != nil {
						helper.Warnw("msg", "releasing leases on shutdown", "chain_id", chain.Services.ID, "error", err.Error())
					}
				})
			}
			wg.Wait()
			feed.Stop()
			retention.Stop()
			return nil
		}),
	)
	return app
}
