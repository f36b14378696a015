// Package server holds the payouts service's Kratos HTTP server.
package server

import (
	"fmt"
	"net"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware/recovery"
	khttp "github.com/go-kratos/kratos/v2/transport/http"
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/controllers"
)

// ProviderSet builds the servers.
var ProviderSet = wire.NewSet(NewHTTPServer)

// HTTPServer is the Kratos HTTP server and the address its listener bound.
type HTTPServer struct {
	*khttp.Server
	// Addr is host:port as bound (Kratos' Endpoint reports a guessed host instead).
	Addr string
}

// NewHTTPServer binds the configured address at once (a busy port fails here, and port 0
// gets its real port before anything starts) and routes the controllers.
func NewHTTPServer(bc *conf.Bootstrap, payouts *controllers.PayoutController, logger log.Logger) (*HTTPServer, func(), error) {
	lis, err := net.Listen("tcp", bc.Server.HTTP.Addr)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s: %w", bc.Server.HTTP.Addr, err)
	}
	srv := khttp.NewServer(
		khttp.Listener(lis),
		khttp.Timeout(bc.Server.HTTP.Timeout.Std()),
		khttp.Middleware(recovery.Recovery()),
		khttp.Logger(logger),
	)
	payouts.Register(srv.Route("/"))
	// Stop closes the listener when the app ran; this covers a start that failed before.
	return &HTTPServer{Server: srv, Addr: lis.Addr().String()}, func() { _ = lis.Close() }, nil
}
