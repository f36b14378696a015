//go:build wireinject

package app

import (
	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/console"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// New assembles config -> data -> repositories -> services -> controllers -> servers, with
// one chain stack (newChainStack) per served chain.
// version is the running binary's version (main sets it at build time).
func New(*conf.Bootstrap, *server.Listeners, log.Logger, services.BuildVersion) (*kratos.App, func(), error) {
	panic(wire.Build(
		wire.FieldsOf(new(*conf.Bootstrap), "Node", "Server", "Database", "Lease", "Routing", "Auth", "Observability", "Console"),
		telemetry.ProviderSet,
		repositories.ProviderSet,
		services.ProviderSet,
		SharedConfigSet,
		workers.ProviderSet,
		controllers.ProviderSet,
		console.ProviderSet,
		server.ProviderSet,
		wire.Bind(new(server.DatabaseReplication), new(*repositories.ServerWatch)),
		NewSignerRegistry,
		wire.Struct(new(ChainShared), "*"),
		NewChainStacks,
		NewSignerRoster,
		ChainServicesOf,
		ReadinessChainsOf,
		NewBanner,
		newApp,
	))
}

// newChainStack assembles what belongs to one chain: its connection, repositories scoped
// to its rows, lease manager, allocator, writer, pipeline and use cases. view is the
// configuration as that chain sees it (conf.Bootstrap.ChainViews).
func newChainStack(view *conf.Bootstrap, shared *ChainShared) (*ChainStack, func(), error) {
	panic(wire.Build(
		wire.FieldsOf(new(*ChainShared), "Pool", "Manager", "ServerWatch", "Incarnation", "Signers", "Feed", "Nodes", "Standby"),
		NewChainConnection,
		wire.FieldsOf(new(*ChainConnection), "Chain", "ChainID"),
		chainMetrics,
		chainLogger,
		repositories.ChainProviderSet,
		services.ChainProviderSet,
		ChainConfigSet,
		PipelineSet,
		// Each consumer gets the part of the chain it uses (services' narrow ports): one
		// adapter, many views.
		wire.Bind(new(services.NonceSource), new(services.Chain)),
		wire.Bind(new(stuck.Chain), new(services.Chain)),
		wire.Bind(new(services.CallSimulator), new(services.Chain)),
		wire.Bind(new(services.TxSender), new(services.Chain)),
		wire.Bind(new(services.ReceiptSource), new(services.Chain)),
		wire.Bind(new(services.ChainHistory), new(services.Chain)),
		wire.Bind(new(services.SentFinder), new(services.Chain)),
		wire.Bind(new(services.FundsChain), new(services.Chain)),
		wire.Bind(new(submitting.Chain), new(services.Chain)),
		workers.ChainProviderSet,
		writer.ChainProviderSet,
		wire.Bind(new(services.SignerDirectory), new(*signer.Registry)),
		wire.Bind(new(services.TxSigner), new(*signer.Registry)),
		wire.Bind(new(services.DatabaseServerEpoch), new(*repositories.ServerWatch)),
		newChainServices,
		wire.Struct(new(ChainStack), "*"),
	))
}
