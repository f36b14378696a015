// Package txmclient is the Go client of txmanager-service: creates that are safe to retry
// (a request id is mandatory, and the same one is sent on every retry), reads, waiting for
// one transaction to be final, watching the completions feed, and the operators' calls.
//
// It speaks gRPC through Kratos' transport, so a Kratos caller's middleware (tracing,
// metrics, logging) runs on its calls too, and trace context travels with each request. It
// depends on the API module, Kratos' transport and gRPC only; the consumer that applies
// completions exactly once in the caller's own PostgreSQL database is a module of its own
// (github.com/bionicotaku/txmanager-service/client/feed), so only a caller that uses it
// pulls in a database driver.
//
// Errors are the service's: test them with the API module's generated helpers
// (v1.IsNotFound(err), v1.IsSignerQuarantined(err), ...). Retryable reports which ones the
// client already retried.
package txmclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/tracing"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// ErrRequestIDRequired: a create without a request id cannot be retried safely, so this
// client does not send one.
var ErrRequestIDRequired = errors.New("txmclient: a create needs a requestId (it makes retries safe)")

// Config is what a caller sets; the zero value of every field but Endpoints is a default.
type Config struct {
	// Endpoints are the service's gRPC addresses (host:port): one behind a load balancer,
	// or the nodes themselves. A node that answers NOT_LEADER (basic routing), or cannot
	// be reached, is followed at once by the next endpoint.
	Endpoints []string
	// APIKey is sent as x-api-key; BearerToken, when set, supplies a JWT per call instead.
	APIKey      string
	BearerToken func(ctx context.Context) (string, error)
	// TLS, when set, secures the connection (nil: plaintext, e.g. inside a mesh).
	TLS *tls.Config
	// PlaintextCredentials lets the API key or token travel without TLS to an endpoint that
	// is not on this machine: set it only where something else encrypts the connection (a
	// service mesh's sidecar). Without it, New refuses such a configuration.
	PlaintextCredentials bool
	// CallTimeout bounds one attempt (default 10s); a long-poll's attempt gets its wait on
	// top. The caller's context bounds them all.
	CallTimeout time.Duration
	// MaxAttempts bounds the attempts of one call (default 8).
	MaxAttempts int
	// Backoff is the first wait between attempts when the service gave no Retry-After
	// (default 100ms, doubling up to 5s).
	Backoff time.Duration
	// LongPoll is how long one waiting call (Wait, ListCompletions by a consumer) asks the
	// service to hold it open (default 25s, at most the service's feed.maxWait).
	LongPoll time.Duration
	// KeepAlive is how often an idle connection is pinged (default 20s; gRPC takes no less
	// than 10s); one unanswered for half that is closed and made again. A completions
	// stream on a route a NAT or a load balancer dropped without a word would otherwise
	// wait for the operating system's TCP keepalive, two hours on Linux, delivering
	// nothing and raising nothing.
	KeepAlive time.Duration
	// Middleware runs on every call, after tracing.
	Middleware []middleware.Middleware
}

// Client calls txmanager-service.
type Client struct {
	cfg   Config
	nodes []node
}

// node is one endpoint's connection.
type node struct {
	endpoint string
	conn     *grpc.ClientConn
	tx       v1.TxServiceClient
	admin    v1.AdminServiceClient
}

// New connects to the service; the cleanup closes the connections. Connections are made
// lazily: New succeeds while the service is still starting.
func New(ctx context.Context, cfg Config) (*Client, func(), error) {
	if len(cfg.Endpoints) == 0 {
		return nil, nil, errors.New("txmclient: no Endpoints")
	}
	if err := checkCredentialsTransport(cfg); err != nil {
		return nil, nil, err
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 8
	}
	if cfg.Backoff <= 0 {
		cfg.Backoff = 100 * time.Millisecond
	}
	if cfg.LongPoll <= 0 {
		cfg.LongPoll = 25 * time.Second
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 20 * time.Second
	}
	mw := append([]middleware.Middleware{tracing.Client()}, cfg.Middleware...)
	// No transport timeout: each attempt gets its own deadline (CallTimeout, plus the wait
	// of a long-poll), which Kratos' single per-connection timeout cannot express.
	opts := []kgrpc.ClientOption{kgrpc.WithMiddleware(mw...), kgrpc.WithTimeout(0),
		kgrpc.WithOptions(grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxAnswerBytes)),
			grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: cfg.KeepAlive, Timeout: max(cfg.KeepAlive, 10*time.Second) / 2}))}
	dial := kgrpc.DialInsecure
	if cfg.TLS != nil {
		opts, dial = append(opts, kgrpc.WithTLSConfig(cfg.TLS)), kgrpc.Dial
	}
	c := &Client{cfg: cfg}
	closeAll := func() {
		for _, n := range c.nodes {
			_ = n.conn.Close()
		}
	}
	for _, endpoint := range cfg.Endpoints {
		conn, err := dial(ctx, append(opts, kgrpc.WithEndpoint(endpoint))...)
		if err != nil {
			closeAll()
			return nil, nil, fmt.Errorf("txmclient: dial %s: %w", endpoint, err)
		}
		c.nodes = append(c.nodes, node{endpoint: endpoint, conn: conn, tx: v1.NewTxServiceClient(conn), admin: v1.NewAdminServiceClient(conn)})
	}
	return c, closeAll, nil
}

// ErrPlaintextCredentials: the configuration would send an API key or token without TLS to
// another machine, where anyone on the path could read and reuse it.
var ErrPlaintextCredentials = errors.New("txmclient: credentials would travel in plaintext: set TLS, or PlaintextCredentials where a mesh encrypts the connection")

func checkCredentialsTransport(cfg Config) error {
	if cfg.TLS != nil || cfg.PlaintextCredentials || (cfg.APIKey == "" && cfg.BearerToken == nil) {
		return nil
	}
	for _, endpoint := range cfg.Endpoints {
		if !onThisMachine(endpoint) {
			return fmt.Errorf("%w (endpoint %s)", ErrPlaintextCredentials, endpoint)
		}
	}
	return nil
}

// onThisMachine reports whether endpoint ("host:port", or a gRPC target such as
// "dns:///host:port") names a loopback address or a Unix socket. A name resolved elsewhere (a discovery
// target) is not known to be, and counts as another machine.
func onThisMachine(endpoint string) bool {
	if strings.HasPrefix(endpoint, "unix:") || strings.HasPrefix(endpoint, "unix-abstract:") {
		return true
	}
	if _, rest, ok := strings.Cut(endpoint, "://"); ok {
		endpoint = strings.TrimPrefix(rest, "/")
		if i := strings.LastIndex(endpoint, "/"); i >= 0 {
			endpoint = endpoint[i+1:]
		}
	}
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		host = strings.TrimSuffix(strings.TrimPrefix(endpoint, "["), "]")
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// NewFromConfig is New for dependency injection (Wire): it dials with a background
// context (the connection is lazy; calls carry their own deadlines).
func NewFromConfig(cfg Config) (*Client, func(), error) {
	return New(context.Background(), cfg)
}

// Create asks for a transaction. The same request id is sent on every retry, so a create
// is executed once whatever is retried: a replay returns the first transaction with
// Created false.
func (c *Client) Create(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	if req.GetRequestId() == "" {
		return nil, ErrRequestIDRequired
	}
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.CreateTxResponse, error) {
		return n.tx.CreateTx(ctx, req)
	})
}

// Get reads a transaction by id.
func (c *Client) Get(ctx context.Context, txID string) (*v1.Tx, error) {
	return c.getTx(ctx, &v1.GetTxRequest{TxId: txID})
}

// GetByRequest reads a transaction by its signer and request id on a deployment's only
// chain.
func (c *Client) GetByRequest(ctx context.Context, signer, requestID string) (*v1.Tx, error) {
	return c.GetByRequestOnChain(ctx, 0, signer, requestID)
}

// GetByRequestOnChain reads a transaction by chain, signer and request id: a request id
// belongs to one chain's signer, so a deployment serving several chains needs the chain.
func (c *Client) GetByRequestOnChain(ctx context.Context, chainID uint64, signer, requestID string) (*v1.Tx, error) {
	return c.getTxByRequest(ctx, &v1.GetTxByRequestRequest{ChainId: chainID, Signer: signer, RequestId: requestID})
}

// Wait returns the transaction once it is final (CONFIRMED or FAILED_FINAL; an intent
// waiting for approval may end EXPIRED, REJECTED or REFUSED instead), or the
// context's error. It does not poll: each call asks the service to hold the read open
// until the transaction is final (a long-poll of LongPoll), and the service answers as
// soon as the feed positions the transaction's completion.
func (c *Client) Wait(ctx context.Context, txID string) (*v1.Tx, error) {
	return c.waitFinal(ctx, func(ctx context.Context, wait time.Duration) (*v1.Tx, error) {
		return c.getTx(ctx, &v1.GetTxRequest{TxId: txID, Wait: durationOf(wait)})
	})
}

// WaitByRequest is Wait for the transaction of a signer's request id (chainID 0: the
// deployment's only chain).
func (c *Client) WaitByRequest(ctx context.Context, chainID uint64, signer, requestID string) (*v1.Tx, error) {
	return c.waitFinal(ctx, func(ctx context.Context, wait time.Duration) (*v1.Tx, error) {
		return c.getTxByRequest(ctx, &v1.GetTxByRequestRequest{ChainId: chainID, Signer: signer, RequestId: requestID, Wait: durationOf(wait)})
	})
}

// Final reports whether a transaction state is final: CONFIRMED or FAILED_FINAL, or, for an
// intent a policy sent for approval that never got a nonce, EXPIRED, REJECTED or REFUSED.
func Final(state string) bool {
	switch state {
	case "CONFIRMED", "FAILED_FINAL", "EXPIRED", "REJECTED", "REFUSED":
		return true
	}
	return false
}

func (c *Client) waitFinal(ctx context.Context, read func(context.Context, time.Duration) (*v1.Tx, error)) (*v1.Tx, error) {
	backoff := c.cfg.Backoff
	// answered: a read came back, so the service is there and knows the transaction.
	answered := false
	for {
		started := time.Now()
		tx, err := read(ctx, c.cfg.LongPoll)
		answered = answered || err == nil
		switch again, _ := Retryable(err); {
		case err != nil && (!again || !answered || ctx.Err() != nil):
			// Not retried, or never answered at all (a wrong address, a cluster that is
			// down): the caller hears it rather than waiting without a word.
			return nil, err
		case err != nil:
			// The service answered before and could not through every attempt of this
			// read (a restart, a failover): the transaction goes on meanwhile, so the wait
			// does too, until the context ends, asking again after a backoff.
		case Final(tx.GetState()):
			return tx, nil
		case time.Since(started) >= c.cfg.LongPoll/2:
			// The long-poll ran out with the transaction still open: ask again. An answer
			// that came back early (a service whose feed.maxWait is shorter, or 0; the last
			// second before a deadline) waits first, or the loop would ask as fast as it is
			// answered.
			backoff = c.cfg.Backoff
			continue
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

func (c *Client) getTx(ctx context.Context, req *v1.GetTxRequest) (*v1.Tx, error) {
	return retry(ctx, c, idempotent, c.timeoutFor(req.GetWait().AsDuration()), func(ctx context.Context, n node) (*v1.Tx, error) {
		return n.tx.GetTx(ctx, req)
	})
}

func (c *Client) getTxByRequest(ctx context.Context, req *v1.GetTxByRequestRequest) (*v1.Tx, error) {
	return retry(ctx, c, idempotent, c.timeoutFor(req.GetWait().AsDuration()), func(ctx context.Context, n node) (*v1.Tx, error) {
		return n.tx.GetTxByRequest(ctx, req)
	})
}

// ListCompletions reads one page of the completions feed after cursor ("" = from the
// start); wait > 0 long-polls: an empty page comes back only after wait.
func (c *Client) ListCompletions(ctx context.Context, after string, limit uint32, wait time.Duration) (*v1.ListCompletionsResponse, error) {
	req := &v1.ListCompletionsRequest{After: after, Limit: limit}
	if wait > 0 {
		req.Wait = durationOf(wait)
	}
	return retry(ctx, c, idempotent, c.timeoutFor(wait), func(ctx context.Context, n node) (*v1.ListCompletionsResponse, error) {
		return n.tx.ListCompletions(ctx, req)
	})
}

// timeoutFor is one attempt's deadline for a call that may be held open for wait.
func (c *Client) timeoutFor(wait time.Duration) time.Duration {
	return c.cfg.CallTimeout + max(wait, 0)
}

// withCredentials adds the configured credential to an outgoing call.
func (c *Client) withCredentials(ctx context.Context) (context.Context, error) {
	switch {
	case c.cfg.BearerToken != nil:
		token, err := c.cfg.BearerToken(ctx)
		if err != nil {
			return nil, fmt.Errorf("txmclient: bearer token: %w", err)
		}
		return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token), nil
	case c.cfg.APIKey != "":
		return metadata.AppendToOutgoingContext(ctx, "x-api-key", c.cfg.APIKey), nil
	}
	return ctx, nil
}
