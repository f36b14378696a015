package txmclient

import (
	"context"

	"github.com/google/wire"
)

// ProviderSet gives a Kratos service a *Client from its Config.
var ProviderSet = wire.NewSet(NewFromConfig)

// NewFromConfig is New for Wire: it dials with a background context (the connection is
// lazy; calls carry their own deadlines).
func NewFromConfig(cfg Config) (*Client, func(), error) {
	return New(context.Background(), cfg)
}
