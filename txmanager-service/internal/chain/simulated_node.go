package chain

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	gethlog "github.com/ethereum/go-ethereum/log"
	"github.com/ethereum/go-ethereum/node"
)

type simulatedOption = func(*node.Config, *ethconfig.Config)

// startBackend starts the simulated node, serving HTTP on httpAddr when it is set, and
// returns the endpoint URL ("" without HTTP). Port 0 is handed to the node as it is, so
// the port is never free between being picked and being bound.
func startBackend(alloc types.GenesisAlloc, options []simulatedOption, httpAddr string) (*simulated.Backend, string, error) {
	if httpAddr == "" {
		backend, err := newBackend(alloc, options)
		return backend, "", err
	}
	host, portText, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return nil, "", fmt.Errorf("HTTPAddr %q: %w", httpAddr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", fmt.Errorf("HTTPAddr %q: invalid port", httpAddr)
	}
	bound := &boundHTTPAddr{}
	backend, err := newBackend(alloc, append(options, withHTTP(host, port, bound)))
	if err != nil {
		return nil, "", err
	}
	addr := bound.get()
	_, boundPort, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, "", errors.Join(fmt.Errorf("HTTPAddr %q: the node did not report the address it bound (%q)", httpAddr, addr), backend.Close())
	}
	// The configured host, not the listener's IP: a name listed in the virtual hosts stays
	// the name clients use.
	return backend, "http://" + net.JoinHostPort(host, boundPort), nil
}

// newBackend turns simulated.NewBackend's panics into errors: it panics when the node
// fails to start, which a busy HTTP port makes an ordinary runtime failure.
func newBackend(alloc types.GenesisAlloc, options []simulatedOption) (backend *simulated.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start simulated node: %v", r)
		}
	}()
	return simulated.NewBackend(alloc, options...), nil
}

func withHTTP(host string, port int, bound *boundHTTPAddr) simulatedOption {
	return func(nodeConf *node.Config, _ *ethconfig.Config) {
		nodeConf.HTTPHost = host
		nodeConf.HTTPPort = port
		// The default modules leave out eth, which is the whole point here.
		nodeConf.HTTPModules = []string{"eth", "net", "web3"}
		// Requests addressed by IP pass geth's virtual-host check anyway; a name does not
		// unless listed.
		nodeConf.HTTPVirtualHosts = []string{"localhost", host}
		// The node logs where it listens: the default logger would write to geth's root
		// logger, so the recorder passes everything on to that.
		inner := gethlog.Root().Handler()
		if nodeConf.Logger != nil {
			inner = nodeConf.Logger.Handler()
		}
		nodeConf.Logger = gethlog.NewLogger(&httpBindRecorder{inner: inner, bound: bound})
	}
}

// gethHTTPStarted is the message go-ethereum's node logs, with the listener's address as
// "endpoint", once its HTTP server is bound (node/rpcstack.go). The simulated backend keeps
// its node private, so this record is the only place the port the kernel picked shows up;
// TestSimulatedServesJSONRPCOverHTTP fails if a go-ethereum upgrade renames it.
const gethHTTPStarted = "HTTP server started"

// boundHTTPAddr is the address the node's HTTP server reported it bound.
type boundHTTPAddr struct {
	mu   sync.Mutex
	addr string
}

func (b *boundHTTPAddr) set(addr string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	// The simulated node starts no other HTTP server (no WebSocket, no authenticated
	// engine API), so the first is the JSON-RPC one.
	if b.addr == "" {
		b.addr = addr
	}
}

func (b *boundHTTPAddr) get() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// httpBindRecorder is the node's log handler: it records the address of gethHTTPStarted
// and passes every record on to inner.
type httpBindRecorder struct {
	inner slog.Handler
	bound *boundHTTPAddr
}

func (h *httpBindRecorder) Enabled(ctx context.Context, level slog.Level) bool {
	// Info must reach Handle even when inner drops it (geth's root logger discards
	// everything unless a program sets one up).
	return level == slog.LevelInfo || h.inner.Enabled(ctx, level)
}

func (h *httpBindRecorder) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == gethHTTPStarted {
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "endpoint" {
				h.bound.set(a.Value.String())
				return false
			}
			return true
		})
	}
	if !h.inner.Enabled(ctx, r.Level) {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *httpBindRecorder) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &httpBindRecorder{inner: h.inner.WithAttrs(attrs), bound: h.bound}
}

func (h *httpBindRecorder) WithGroup(name string) slog.Handler {
	return &httpBindRecorder{inner: h.inner.WithGroup(name), bound: h.bound}
}
