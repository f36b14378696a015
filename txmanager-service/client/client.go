// Package txmclient is the Go client of txmanager-service, for Kratos services that call it:
// creates that are safe to retry (a request id is mandatory, and the same one is sent on
// every retry), reads, and a consumer of the completions feed that applies each completion
// exactly once in the caller's own database.
//
// It speaks gRPC through Kratos' transport, so callers' middleware (tracing, metrics,
// logging) runs on its calls too; trace context travels to the service with the request.
package txmclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/tracing"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// ErrRequestIDRequired: a create without a request id cannot be retried safely, so this
// client does not send one.
var ErrRequestIDRequired = errors.New("txmclient: a create needs a requestId (it makes retries safe)")

// Config is what a caller sets; the zero value of every field but Endpoint is a default.
type Config struct {
	// Endpoints are the service's gRPC addresses (host:port): one behind a load balancer,
	// or the nodes themselves. A node that answers NOT_LEADER (basic routing) is followed at
	// once by the next endpoint.
	Endpoints []string
	// APIKey is sent as x-api-key; BearerToken, when set, supplies a JWT per call instead.
	APIKey      string
	BearerToken func(ctx context.Context) (string, error)
	// TLS, when set, secures the connection (nil: plaintext, e.g. inside a mesh).
	TLS *tls.Config
	// CallTimeout bounds one attempt (default 10s); the caller's context bounds them all.
	CallTimeout time.Duration
	// MaxAttempts bounds the attempts of one call (default 8).
	MaxAttempts int
	// Backoff is the first wait between attempts when the service gave no Retry-After
	// (default 100ms, doubling up to 5s).
	Backoff time.Duration
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
	conn  *grpc.ClientConn
	tx    v1.TxServiceClient
	admin v1.AdminServiceClient
}

// New connects to the service; the cleanup closes the connections.
func New(ctx context.Context, cfg Config) (*Client, func(), error) {
	if len(cfg.Endpoints) == 0 {
		return nil, nil, errors.New("txmclient: no Endpoints")
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
	mw := append([]middleware.Middleware{tracing.Client()}, cfg.Middleware...)
	opts := []kgrpc.ClientOption{kgrpc.WithMiddleware(mw...), kgrpc.WithTimeout(cfg.CallTimeout)}
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
		c.nodes = append(c.nodes, node{conn: conn, tx: v1.NewTxServiceClient(conn), admin: v1.NewAdminServiceClient(conn)})
	}
	return c, closeAll, nil
}

// Create asks for a transaction. The same request id is sent on every retry, so a create
// is executed once whatever is retried: a replay returns the first transaction.
func (c *Client) Create(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	if req.GetRequestId() == "" {
		return nil, ErrRequestIDRequired
	}
	return retry(ctx, c, func(ctx context.Context, n node) (*v1.CreateTxResponse, error) { return n.tx.CreateTx(ctx, req) })
}

// Get reads a transaction by id.
func (c *Client) Get(ctx context.Context, txID string) (*v1.Tx, error) {
	return retry(ctx, c, func(ctx context.Context, n node) (*v1.Tx, error) {
		return n.tx.GetTx(ctx, &v1.GetTxRequest{TxId: txID})
	})
}

// GetByRequest reads a transaction by its signer and request id on a deployment's only
// chain.
func (c *Client) GetByRequest(ctx context.Context, signer, requestID string) (*v1.Tx, error) {
	return c.GetByRequestOnChain(ctx, 0, signer, requestID)
}

// GetByRequestOnChain reads a transaction by chain, signer and request id: a request id
// belongs to one chain's signer, so a deployment serving several chains needs the chain.
func (c *Client) GetByRequestOnChain(ctx context.Context, chainID uint64, signer, requestID string) (*v1.Tx, error) {
	return retry(ctx, c, func(ctx context.Context, n node) (*v1.Tx, error) {
		return n.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{ChainId: chainID, Signer: signer, RequestId: requestID})
	})
}

// ListCompletions reads one page of the completions feed after cursor; wait > 0 long-polls.
func (c *Client) ListCompletions(ctx context.Context, after string, limit uint32, wait time.Duration) (*v1.ListCompletionsResponse, error) {
	req := &v1.ListCompletionsRequest{After: after, Limit: limit}
	if wait > 0 {
		req.Wait = durationOf(wait)
	}
	return retry(ctx, c, func(ctx context.Context, n node) (*v1.ListCompletionsResponse, error) {
		return n.tx.ListCompletions(ctx, req)
	})
}

// Admin is the operators' API (first endpoint), for tools that hold an admin credential.
func (c *Client) Admin() v1.AdminServiceClient { return c.nodes[0].admin }

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
