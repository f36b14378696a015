package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// linkProxy is a TCP proxy to PostgreSQL for one node, whose link can be made slow: every
// chunk in either direction waits the current delay. It runs in this process, so the node
// sees a slow network, not a slow database. It listens on a loopback port the kernel picks
// (addr).
type linkProxy struct {
	listener net.Listener
	target   string
	delay    atomic.Int64 // nanoseconds
	wg       sync.WaitGroup
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
}

func newLinkProxy(target string) (*linkProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("database link proxy: %w", err)
	}
	p := &linkProxy{listener: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

func (p *linkProxy) addr() string { return p.listener.Addr().String() }

// setDelay slows the link; a node without a link proxy (nil) has nothing to slow.
func (p *linkProxy) setDelay(d time.Duration) {
	if p != nil {
		p.delay.Store(int64(d))
	}
}

func (p *linkProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, server)
		p.wg.Add(2)
		go p.pipe(server, client)
		go p.pipe(client, server)
	}
}

func (p *linkProxy) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

func (p *linkProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *linkProxy) close() {
	if p == nil {
		return
	}
	_ = p.listener.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// rpcProxy forwards JSON-RPC to the chain; while armed it holds the answer to every
// eth_sendRawTransaction for holdFor after the node has taken the transaction: a node
// frozen mid-broadcast, which is exactly where a paused owner must come back fenced. It
// listens on a loopback port the kernel picks (url).
type rpcProxy struct {
	target   string
	listener net.Listener
	server   *http.Server
	served   sync.WaitGroup
	holdFor  atomic.Int64
	held     atomic.Int64
}

func newRPCProxy(target string) (*rpcProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chain proxy: %w", err)
	}
	p := &rpcProxy{target: target, listener: l}
	p.server = &http.Server{Handler: p}
	p.served.Go(func() { _ = p.server.Serve(l) })
	return p, nil
}

func (p *rpcProxy) url() string { return "http://" + p.listener.Addr().String() }

// close stops the proxy once the requests in flight are answered (a held broadcast is
// answered within its hold), cutting them after 15s.
func (p *rpcProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if p.server.Shutdown(ctx) != nil {
		_ = p.server.Close()
	}
	p.served.Wait()
}

func (p *rpcProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	e2e.ForwardJSONRPC(w, r, p.target, body, func() bool {
		if hold := time.Duration(p.holdFor.Load()); hold > 0 && strings.Contains(string(body), "eth_sendRawTransaction") {
			p.held.Add(1)
			time.Sleep(hold)
		}
		return false
	})
}
