package server

import (
	"errors"
	"fmt"
	"net"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Listeners are the HTTP and gRPC sockets, bound before anything else starts: a port in
// use fails the start at once, before a database or chain is touched, and port 0 gets a
// free port from the kernel with no window in which another process could take it.
type Listeners struct {
	HTTP net.Listener
	GRPC net.Listener
}

// Listen binds the configured server addresses and records the bound ports in c, so the
// rest of the service (node registry, banner, node id) sees where it really listens.
func Listen(c *conf.Bootstrap) (*Listeners, error) {
	httpListener, err := net.Listen("tcp", c.Server.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on server.http.addr: %w", err)
	}
	grpcListener, err := net.Listen("tcp", c.Server.GRPC.Addr)
	if err != nil {
		_ = httpListener.Close()
		return nil, fmt.Errorf("listen on server.grpc.addr: %w", err)
	}
	l := &Listeners{HTTP: httpListener, GRPC: grpcListener}
	if err := c.UseBoundPorts(tcpPort(httpListener), tcpPort(grpcListener)); err != nil {
		_ = l.Close()
		return nil, err
	}
	return l, nil
}

// Close closes both sockets. The servers close them when they stop; this is for a start
// that fails before the servers run.
func (l *Listeners) Close() error {
	errHTTP, errGRPC := l.HTTP.Close(), l.GRPC.Close()
	if errors.Is(errHTTP, net.ErrClosed) {
		errHTTP = nil
	}
	if errors.Is(errGRPC, net.ErrClosed) {
		errGRPC = nil
	}
	return errors.Join(errHTTP, errGRPC)
}

func tcpPort(l net.Listener) int {
	return l.Addr().(*net.TCPAddr).Port
}
