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

// Listen binds the configured server addresses. The assembly records the bound ports
// (Ports) in the configuration, so the rest of the service sees where it really listens.
func Listen(c conf.Server) (*Listeners, error) {
	httpListener, err := net.Listen("tcp", c.HTTP.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen on server.http.addr: %w", err)
	}
	grpcListener, err := net.Listen("tcp", c.GRPC.Addr)
	if err != nil {
		_ = httpListener.Close()
		return nil, fmt.Errorf("listen on server.grpc.addr: %w", err)
	}
	return &Listeners{HTTP: httpListener, GRPC: grpcListener}, nil
}

// Ports are the bound HTTP and gRPC ports (the kernel's choice for a configured port 0).
func (l *Listeners) Ports() (httpPort, grpcPort int) {
	return tcpPort(l.HTTP), tcpPort(l.GRPC)
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
