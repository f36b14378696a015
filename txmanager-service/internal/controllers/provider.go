package controllers

import (
	"time"

	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// ProviderSet is the controller layer.
var ProviderSet = wire.NewSet(NewTxController, NewAdminController, NewRouting)

// NewRouting maps the routing section.
func NewRouting(c *conf.Bootstrap) Routing {
	return Routing{Forward: c.Routing.Mode == conf.RoutingForward, MaxHops: c.Routing.MaxHops, RetryWait: 500 * time.Millisecond}
}
