package server

import (
	"net"
	nethttp "net/http"
	"net/http/pprof"
	"net/url"
	"path"
	"strings"

	"github.com/go-kratos/kratos/v2/encoding"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	khttp "github.com/go-kratos/kratos/v2/transport/http"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/console"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// NewHTTPServer serves the API over HTTP/JSON.
func NewHTTPServer(c conf.Server, observability conf.Observability, listeners *Listeners, tlsConfigs *TLSConfigs, tx *controllers.TxController, admin *controllers.AdminController,
	health *Health, prom *telemetry.Prometheus, auth *Authenticator, mw *Middleware, limiter *RateLimiter, operatorConsole *console.Console) *khttp.Server {
	opts := []khttp.ServerOption{
		khttp.Listener(listeners.HTTP),
		khttp.Timeout(c.HTTP.Timeout.Std()),
		khttp.Middleware(mw.chain...),
		khttp.Filter(loopbackHostsOnly(auth.enabled), cleanPathsOnly, wholeQueriesOnly, plainBodiesOnly, limitBody(c.MaxBodyBytes, c.MaxBatchBodyBytes)),
		// Kratos would hand unknown routes to net/http's global DefaultServeMux.
		khttp.NotFoundHandler(nethttp.HandlerFunc(notFound)),
		khttp.MethodNotAllowedHandler(nethttp.HandlerFunc(methodNotAllowed)),
		khttp.ErrorEncoder(encodeError),
		khttp.ResponseEncoder(encodeResponse),
	}
	if tlsConfigs.HTTP != nil {
		opts = append(opts, khttp.TLSConfig(tlsConfigs.HTTP))
	}
	srv := khttp.NewServer(opts...)
	// A client that trickles its headers (slow-loris) or parks idle keep-alive connections
	// must not hold sockets for ever.
	srv.ReadHeaderTimeout = c.HTTP.ReadHeaderTimeout.Std()
	srv.IdleTimeout = c.HTTP.IdleTimeout.Std()
	// Nor may one trickle a body: reading it ignores the handler's timeout, and it is read
	// before authentication. The headers' time and the request's own bound it.
	srv.ReadTimeout = c.HTTP.ReadHeaderTimeout.Std() + c.HTTP.Timeout.Std()
	v1.RegisterTxServiceHTTPServer(srv, tx, v1.HTTPOptions{MaxBodyBytes: c.MaxBodyBytes, MaxBatchBodyBytes: max(c.MaxBodyBytes, c.MaxBatchBodyBytes)})
	v1.RegisterAdminServiceHTTPServer(srv, admin, v1.HTTPOptions{MaxBodyBytes: c.MaxBodyBytes})
	srv.HandleFunc(OpenAPIPath, serveOpenAPI)
	if operatorConsole.Enabled() {
		srv.HandlePrefix(console.Path, operatorConsole.Handler(limiter.consoleAuth(auth.fromHeaders)))
	}
	srv.HandleFunc("/healthz", health.Live)
	srv.HandleFunc("/readyz", health.Ready)
	srv.Handle("/metrics", auth.MetricsHandler(observability.MetricsAuth, prom.Handler))
	if observability.Pprof {
		profiles := nethttp.NewServeMux()
		profiles.HandleFunc("/debug/pprof/", pprof.Index)
		profiles.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		profiles.HandleFunc("/debug/pprof/profile", pprof.Profile)
		profiles.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		profiles.HandleFunc("/debug/pprof/trace", pprof.Trace)
		srv.HandlePrefix("/debug/pprof/", auth.MetricsHandler(observability.MetricsAuth, profiles))
	}
	return srv
}

// encodeResponse writes messages with a hand-written JSON encoder directly (the same
// bytes protojson would produce, at a tenth of the CPU); a client that asks for protobuf
// gets protobuf, and everything else JSON. Kratos' other codecs (XML, form) cannot encode
// every answer, and a create written but answered 500 invites a second one.
func encodeResponse(w nethttp.ResponseWriter, r *nethttp.Request, v any) error {
	codec := codecFor(r)
	if msg, ok := v.(v1.JSONAppender); ok && codec == jsonCodec {
		w.Header().Set("Content-Type", "application/json")
		_, err := w.Write(msg.AppendJSON(make([]byte, 0, 1024)))
		return err
	}
	if v == nil {
		return nil
	}
	data, err := codec.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/"+codec.Name())
	_, err = w.Write(data)
	return err
}

var (
	jsonCodec  = encoding.GetCodec("json")
	protoCodec = encoding.GetCodec("proto")
)

// codecFor is the codec an answer to r is written with: protobuf when Accept names it,
// else JSON.
func codecFor(r *nethttp.Request) encoding.Codec {
	if codec, ok := khttp.CodecForRequest(r, "Accept"); ok && codec == protoCodec {
		return protoCodec
	}
	return jsonCodec
}

// encodeError writes Kratos errors as JSON (protobuf when asked for), and turns the retry
// hint into Retry-After.
func encodeError(w nethttp.ResponseWriter, r *nethttp.Request, err error) {
	se := kerrors.FromError(err)
	if seconds, ok := se.Metadata[controllers.MetadataRetryAfter]; ok {
		w.Header().Set("Retry-After", seconds)
	}
	codec := codecFor(r)
	body, err := codec.Marshal(se)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(nethttp.StatusInternalServerError)
		_, _ = w.Write([]byte(`{"code":500,"reason":"INTERNAL","message":"internal error"}`))
		return
	}
	w.Header().Set("Content-Type", "application/"+codec.Name())
	w.WriteHeader(int(se.Code))
	_, _ = w.Write(body)
}

// cleanPathsOnly refuses paths that are not in canonical form (encoded slashes, dot
// segments, doubled slashes) instead of letting the router redirect them somewhere else.
// loopbackHostsOnly refuses, with authentication off, a request addressed to a name other
// than a loopback one. Such a service listens on loopback alone, yet a web page the
// developer visits can point a name it controls at 127.0.0.1 (DNS rebinding) and drive a
// service that asks for no credential, the console's actions included: the browser then
// sends that name as the Host.
func loopbackHostsOnly(authEnabled bool) khttp.FilterFunc {
	return func(next nethttp.Handler) nethttp.Handler {
		if authEnabled {
			return next
		}
		return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			if !loopbackHost(r.Host) {
				encodeError(w, r, v1.ErrorPermissionDenied("without authentication the service answers only requests addressed to a loopback name (localhost, 127.0.0.1, [::1])"))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// loopbackHost: hostport names this machine's loopback (localhost, a *.localhost name, or a
// loopback address).
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	return conf.LoopbackHost(host) || strings.HasSuffix(host, ".localhost")
}

func cleanPathsOnly(next nethttp.Handler) nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		p := r.URL.Path
		canonical := path.Clean(p)
		if strings.HasSuffix(p, "/") && canonical != "/" {
			canonical += "/" // a folder's own page (/debug/pprof/)
		}
		if p == "" || canonical != p || strings.Contains(strings.ToLower(r.URL.RawPath), "%2f") {
			encodeError(w, r, v1.InvalidArgument("path", "not in canonical form"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// wholeQueriesOnly refuses a query string the parser cannot take whole: Go's parser drops
// a pair it cannot read (a raw ";", a bad escape) and keeps the rest, so "after=<cursor>;x"
// would lose the cursor and restart a feed reader from the beginning.
func wholeQueriesOnly(next nethttp.Handler) nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
			encodeError(w, r, v1.InvalidArgument("query", "the query string cannot be parsed whole"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// plainBodiesOnly refuses a compressed (or otherwise encoded) body by its header: read as
// it is, a gzip body would be answered "malformed JSON", which says nothing of the cause.
func plainBodiesOnly(next nethttp.Handler) nethttp.Handler {
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		if encoding := r.Header.Get("Content-Encoding"); encoding != "" && !strings.EqualFold(encoding, "identity") {
			encodeError(w, r, v1.ErrorUnsupportedMediaType("a body with a Content-Encoding is not accepted: send it uncompressed"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func notFound(w nethttp.ResponseWriter, r *nethttp.Request) {
	encodeError(w, r, v1.ErrorNotFound("no such endpoint"))
}

func methodNotAllowed(w nethttp.ResponseWriter, r *nethttp.Request) {
	encodeError(w, r, v1.ErrorMethodNotAllowed("method not allowed on this endpoint"))
}

// limitBody caps every request body (a batch of creates at its own cap); reading past the
// cap fails, which the decoder reports as REQUEST_TOO_LARGE instead of buffering an
// unbounded body.
func limitBody(maxBytes, maxBatchBytes int64) khttp.FilterFunc {
	return func(next nethttp.Handler) nethttp.Handler {
		return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
			maxBytes := maxBytes
			if r.URL.Path == v1.BatchPath {
				maxBytes = max(maxBytes, maxBatchBytes)
			}
			if r.ContentLength > maxBytes {
				encodeError(w, r, v1.RequestTooLarge(maxBytes))
				return
			}
			r.Body = nethttp.MaxBytesReader(w, r.Body, maxBytes)
			next.ServeHTTP(w, r)
		})
	}
}
