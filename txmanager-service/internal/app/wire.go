//go:build wireinject

package app

import (
	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
)

// New assembles config -> data -> repositories -> services -> controllers -> servers.
// version is the running binary's version (main sets it at build time).
func New(*conf.Bootstrap, *server.Listeners, log.Logger, services.BuildVersion) (*kratos.App, func(), error) {
	panic(wire.Build(
		telemetry.ProviderSet,
		repositories.ProviderSet,
		services.ProviderSet,
		workers.ProviderSet,
		controllers.ProviderSet,
		server.ProviderSet,
		NewChainConnection,
		wire.FieldsOf(new(*ChainConnection), "Chain", "ChainID"),
		NewSignerRegistry,
		wire.Bind(new(services.SignerDirectory), new(*signer.Registry)),
		wire.Bind(new(services.TxSigner), new(*signer.Registry)),
		wire.Bind(new(workers.BatchAllocator), new(*services.Allocator)),
		NewBanner,
		newApp,
	))
}
