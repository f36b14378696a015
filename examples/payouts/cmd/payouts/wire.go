//go:build wireinject

package main

import (
	"github.com/go-kratos/kratos/v2"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"

	"github.com/bionicotaku/lingo-utils/txmanager"
	txmclient "github.com/bionicotaku/txmanager-service/client"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/controllers"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/server"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/workers"
)

// wireApp lists the layers; wire_gen.go is generated from it (wire gen ./cmd/payouts).
func wireApp(*conf.Bootstrap, log.Logger) (*kratos.App, func(), error) {
	panic(wire.Build(
		conf.ProviderSet,
		txmanager.ProviderSet,
		txmclient.NewFromConfig,
		wire.Bind(new(services.TxManagerClient), new(*txmclient.Client)),
		repositories.ProviderSet,
		services.ProviderSet,
		controllers.ProviderSet,
		server.ProviderSet,
		workers.ProviderSet,
		newApp,
	))
}
