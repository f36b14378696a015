package workers

import (
	"context"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// WebhookLoop claims and renews this node's webhook subscriptions every
// webhooks.passInterval; the deliveries themselves run beside it, one per subscription.
type WebhookLoop struct {
	loop      *Loop
	deliverer *services.WebhookDeliverer
}

// NewWebhookLoop builds the loop; with webhooks.enabled off it does nothing.
func NewWebhookLoop(cfg services.WebhookConfig, deliverer *services.WebhookDeliverer) *WebhookLoop {
	if !cfg.Enabled {
		return &WebhookLoop{}
	}
	return &WebhookLoop{loop: boundedLoop(cfg.PassInterval, deliverer.Pass), deliverer: deliverer}
}

// Start runs the loop.
func (l *WebhookLoop) Start(ctx context.Context) {
	if l.loop != nil {
		l.loop.Start(ctx)
	}
}

// Stop ends the loop and every delivery, and lets this node's subscriptions go so another
// node takes them at once.
func (l *WebhookLoop) Stop(ctx context.Context) {
	if l.loop == nil {
		return
	}
	l.loop.Stop()
	l.deliverer.Stop(ctx)
}
