package txmclient

import (
	"context"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// CreateWebhook subscribes a receiver to pushed events (needs the admin grant). The answer
// carries the signing secret this once.
func (c *Client) CreateWebhook(ctx context.Context, req *v1.CreateWebhookRequest) (*v1.CreateWebhookResponse, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.CreateWebhookResponse, error) {
		return n.admin.CreateWebhook(ctx, req)
	})
}

// Webhooks lists every subscription with its cursor and delivery state.
func (c *Client) Webhooks(ctx context.Context) ([]*v1.Webhook, error) {
	resp, err := retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.ListWebhooksResponse, error) {
		return n.admin.ListWebhooks(ctx, &v1.ListWebhooksRequest{})
	})
	return resp.GetWebhooks(), err
}

// Webhook reads one subscription.
func (c *Client) Webhook(ctx context.Context, id string) (*v1.Webhook, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Webhook, error) {
		return n.admin.GetWebhook(ctx, &v1.WebhookRequest{SubscriptionId: id})
	})
}

// PauseWebhook stops a subscription's deliveries until it is resumed.
func (c *Client) PauseWebhook(ctx context.Context, id string) (*v1.Webhook, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Webhook, error) {
		return n.admin.PauseWebhook(ctx, &v1.WebhookRequest{SubscriptionId: id})
	})
}

// ResumeWebhook restarts a paused or dead subscription from its cursor.
func (c *Client) ResumeWebhook(ctx context.Context, id string) (*v1.Webhook, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Webhook, error) {
		return n.admin.ResumeWebhook(ctx, &v1.WebhookRequest{SubscriptionId: id})
	})
}

// ReplayWebhook delivers again everything after a feed position (0: all still kept). It is
// sent again only after an answer saying it was not carried out: after a lost answer the
// replay may have happened and its deliveries begun, and a second one would send them all
// again.
func (c *Client) ReplayWebhook(ctx context.Context, id string, cursor int64) (*v1.Webhook, error) {
	return retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.Webhook, error) {
		return n.admin.ReplayWebhook(ctx, &v1.ReplayWebhookRequest{SubscriptionId: id, Cursor: cursor})
	})
}

// DeleteWebhook removes a subscription; nothing more is sent to it.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.DeleteWebhookResponse, error) {
		return n.admin.DeleteWebhook(ctx, &v1.WebhookRequest{SubscriptionId: id})
	})
	return err
}

// SetFunding watches a signer's balance with low- and high-water marks (wei, decimal) and,
// with a treasury, refills it from there.
func (c *Client) SetFunding(ctx context.Context, req *v1.SetFundingRequest) (*v1.SignerFunding, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.SignerFunding, error) {
		return n.admin.SetFunding(ctx, req)
	})
}

// Funding reads a signer's funding marks and where its balance stands.
func (c *Client) Funding(ctx context.Context, chainID uint64, signer string) (*v1.SignerFunding, error) {
	return retry(ctx, c, idempotent, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.SignerFunding, error) {
		return n.admin.GetFunding(ctx, &v1.FundingRequest{Signer: signer, ChainId: chainID})
	})
}

// DeleteFunding stops watching a signer's balance.
func (c *Client) DeleteFunding(ctx context.Context, chainID uint64, signer string) error {
	_, err := retry(ctx, c, refusedOnly, c.cfg.CallTimeout, func(ctx context.Context, n node) (*v1.DeleteFundingResponse, error) {
		return n.admin.DeleteFunding(ctx, &v1.FundingRequest{Signer: signer, ChainId: chainID})
	})
	return err
}
