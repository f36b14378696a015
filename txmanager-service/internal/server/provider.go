package server

import "github.com/google/wire"

// ProviderSet is the transport layer.
var ProviderSet = wire.NewSet(NewHTTPServer, NewGRPCServer, NewHealth)
