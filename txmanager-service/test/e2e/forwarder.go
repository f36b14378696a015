package e2e

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Forwarder is a TCP forwarder on a loopback port the kernel picks, whose target can move:
// a client configured with its address keeps it while the server behind restarts on
// another port, or while another server takes over the address (as a virtual IP moves to a
// promoted standby).
type Forwarder struct {
	listener net.Listener
	mu       sync.Mutex
	target   string
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewForwarder listens on 127.0.0.1:0 and forwards each new connection to target.
func NewForwarder(target string) (*Forwarder, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("forwarder: %w", err)
	}
	f := &Forwarder{listener: l, target: target, conns: map[net.Conn]struct{}{}}
	f.wg.Go(f.accept)
	return f, nil
}

// Addr is the host:port clients connect to.
func (f *Forwarder) Addr() string { return f.listener.Addr().String() }

// SetTarget points new connections at target and cuts the open ones, as a dead server's
// connections would be.
func (f *Forwarder) SetTarget(target string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.target = target
	for c := range f.conns {
		_ = c.Close()
	}
}

// Close stops listening, cuts every connection and waits for the copies to end.
func (f *Forwarder) Close() {
	_ = f.listener.Close()
	f.SetTarget("")
	f.wg.Wait()
}

func (f *Forwarder) accept() {
	for {
		client, err := f.listener.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		target := f.target
		f.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			_ = client.Close()
			continue
		}
		f.mu.Lock()
		f.conns[client], f.conns[server] = struct{}{}, struct{}{}
		f.mu.Unlock()
		f.wg.Go(func() { f.pipe(client, server) })
		f.wg.Go(func() { f.pipe(server, client) })
	}
}

func (f *Forwarder) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	f.mu.Lock()
	delete(f.conns, dst)
	delete(f.conns, src)
	f.mu.Unlock()
}
