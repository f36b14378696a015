package localkms

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Front is a fault proxy on a loopback port of its own in front of the emulator: it
// passes requests through, or answers signing requests as a throttling KMS does, or holds
// every request unanswered as a KMS that stopped responding.
type Front struct {
	url      string
	server   *http.Server
	serving  sync.WaitGroup
	proxy    *httputil.ReverseProxy
	throttle atomic.Int64 // the next n Sign requests get ThrottlingException
	signs    atomic.Int64 // Sign requests received

	mu     sync.Mutex
	hung   chan struct{} // closed by Release; nil while passing
	closed chan struct{}
}

// StartFront listens on 127.0.0.1:0 and forwards to upstream (the emulator's URL).
func StartFront(upstream string) (*Front, error) {
	target, err := url.Parse(upstream)
	if err != nil {
		return nil, fmt.Errorf("kms front: %w", err)
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("kms front: listen: %w", err)
	}
	f := &Front{url: "http://" + listener.Addr().String(), proxy: httputil.NewSingleHostReverseProxy(target), closed: make(chan struct{})}
	// A request its caller gave up on is no news; answer a failed forward quietly.
	f.proxy.ErrorHandler = func(w http.ResponseWriter, _ *http.Request, err error) {
		http.Error(w, err.Error(), http.StatusBadGateway)
	}
	f.server = &http.Server{Handler: http.HandlerFunc(f.handle), ReadHeaderTimeout: 10 * time.Second}
	f.serving.Go(func() { _ = f.server.Serve(listener) })
	return f, nil
}

// URL is the front's endpoint, to configure as the KMS endpoint.
func (f *Front) URL() string { return f.url }

// Throttle answers the next n Sign requests with ThrottlingException (HTTP 400), as KMS
// does above its request quota.
func (f *Front) Throttle(n int) { f.throttle.Store(int64(n)) }

// SignCalls is how many Sign requests arrived, throttled ones included.
func (f *Front) SignCalls() int64 { return f.signs.Load() }

// Hang holds every request, unanswered, until Release or the caller gives up.
func (f *Front) Hang() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hung == nil {
		f.hung = make(chan struct{})
	}
}

// Release passes requests again, the held ones included.
func (f *Front) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.hung != nil {
		close(f.hung)
		f.hung = nil
	}
}

// Close stops the front; held requests end.
func (f *Front) Close() {
	f.mu.Lock()
	select {
	case <-f.closed:
	default:
		close(f.closed)
	}
	f.mu.Unlock()
	f.Release()
	_ = f.server.Close()
	f.serving.Wait()
}

func (f *Front) handle(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hung := f.hung
	f.mu.Unlock()
	if hung != nil {
		select {
		case <-hung:
		case <-f.closed:
			return
		case <-r.Context().Done():
			return
		}
	}
	// The operation is named by the X-Amz-Target header (TrentService.Sign).
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".Sign") {
		f.signs.Add(1)
		if f.throttle.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/x-amz-json-1.1")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"__type":"ThrottlingException","message":"Rate exceeded"}`))
			return
		}
	}
	f.proxy.ServeHTTP(w, r)
}
