package server

import (
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// ProviderSet is the transport layer.
var ProviderSet = wire.NewSet(NewHTTPServer, NewGRPCServer, NewHealth, NewForwarder, NewAuthenticator, NewMiddleware, NewTLSConfigs, NewRateLimiter, NewStreams,
	wire.Bind(new(controllers.OwnerForwarder), new(*Forwarder)))
