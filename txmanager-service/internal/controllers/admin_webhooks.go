package controllers

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// errNotAssembled answers webhook and funding calls on a stack assembled without them
// (tests of other parts); the service always has them.
var errNotAssembled = v1.ErrorNotFound("webhooks and funding are not served by this stack")

// CreateWebhook implements v1.AdminServiceServer. Subscriptions are the cluster's: any node
// answers.
func (c *AdminController) CreateWebhook(ctx context.Context, req *v1.CreateWebhookRequest) (*v1.CreateWebhookResponse, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	s, secret, err := c.webhooks.Create(ctx, services.SubscriptionInput{URL: req.GetUrl(), Secret: req.GetSecret(), Chains: req.GetChains(), Signers: req.GetSigners(),
		States: req.GetStates(), Kinds: req.GetKinds(), Description: req.GetDescription(), FromStart: req.GetFromStart(),
		BatchSize: req.GetBatchSize()}, callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return &v1.CreateWebhookResponse{Webhook: toAPIWebhook(s), Secret: secret}, nil
}

// ListWebhooks implements v1.AdminServiceServer.
func (c *AdminController) ListWebhooks(ctx context.Context, _ *v1.ListWebhooksRequest) (*v1.ListWebhooksResponse, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	list, err := c.webhooks.List(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListWebhooksResponse{Webhooks: make([]*v1.Webhook, len(list))}
	for i, s := range list {
		out.Webhooks[i] = toAPIWebhook(s)
	}
	return out, nil
}

// GetWebhook implements v1.AdminServiceServer.
func (c *AdminController) GetWebhook(ctx context.Context, req *v1.WebhookRequest) (*v1.Webhook, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	s, err := c.webhooks.Get(ctx, req.GetSubscriptionId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIWebhook(s), nil
}

// PauseWebhook implements v1.AdminServiceServer.
func (c *AdminController) PauseWebhook(ctx context.Context, req *v1.WebhookRequest) (*v1.Webhook, error) {
	return c.setWebhookState(ctx, req.GetSubscriptionId(), domain.SubscriptionPaused)
}

// ResumeWebhook implements v1.AdminServiceServer.
func (c *AdminController) ResumeWebhook(ctx context.Context, req *v1.WebhookRequest) (*v1.Webhook, error) {
	return c.setWebhookState(ctx, req.GetSubscriptionId(), domain.SubscriptionActive)
}

func (c *AdminController) setWebhookState(ctx context.Context, id string, state domain.SubscriptionState) (*v1.Webhook, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	s, err := c.webhooks.SetState(ctx, id, state, callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIWebhook(s), nil
}

// ReplayWebhook implements v1.AdminServiceServer.
func (c *AdminController) ReplayWebhook(ctx context.Context, req *v1.ReplayWebhookRequest) (*v1.Webhook, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	s, err := c.webhooks.Replay(ctx, req.GetSubscriptionId(), req.GetCursor(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIWebhook(s), nil
}

// DeleteWebhook implements v1.AdminServiceServer.
func (c *AdminController) DeleteWebhook(ctx context.Context, req *v1.WebhookRequest) (*v1.DeleteWebhookResponse, error) {
	if err := c.webhookAdmin(ctx); err != nil {
		return nil, err
	}
	if err := c.webhooks.Delete(ctx, req.GetSubscriptionId(), callerID(ctx)); err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return &v1.DeleteWebhookResponse{}, nil
}

func (c *AdminController) webhookAdmin(ctx context.Context) error {
	if err := requireAdmin(ctx); err != nil {
		return err
	}
	if c.webhooks == nil {
		return errNotAssembled
	}
	return nil
}

func toAPIWebhook(s domain.Subscription) *v1.Webhook {
	out := &v1.Webhook{SubscriptionId: s.ID.String(), Url: s.URL, Chains: s.Filter.Chains, States: s.Filter.States, Kinds: s.Filter.Kinds,
		Description: s.Description, State: string(s.State), Cursor: s.Cursor, Delivered: s.Delivered, OwnerNode: s.Owner,
		CreatedAt: timestamppb.New(s.CreatedAt), CreatedBy: s.CreatedBy, LastError: s.LastError, BatchSize: int32(s.BatchSize)}
	for _, a := range s.Filter.Signers {
		out.Signers = append(out.Signers, a.Hex())
	}
	if s.LastSuccessAt != nil {
		out.LastSuccessAt = timestamppb.New(*s.LastSuccessAt)
	}
	if s.FailingSince != nil {
		out.FailingSince = timestamppb.New(*s.FailingSince)
	}
	return out
}

// SetFunding implements v1.AdminServiceServer.
func (c *AdminController) SetFunding(ctx context.Context, req *v1.SetFundingRequest) (*v1.SignerFunding, error) {
	chainID, err := c.fundingAdmin(ctx, req.GetChainId())
	if err != nil {
		return nil, err
	}
	f, err := c.funding.Set(ctx, chainID, req.GetSigner(), req.GetLowWater(), req.GetHighWater(), req.GetTreasury(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIFunding(f), nil
}

// GetFunding implements v1.AdminServiceServer.
func (c *AdminController) GetFunding(ctx context.Context, req *v1.FundingRequest) (*v1.SignerFunding, error) {
	chainID, err := c.fundingAdmin(ctx, req.GetChainId())
	if err != nil {
		return nil, err
	}
	f, err := c.funding.Get(ctx, chainID, req.GetSigner())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIFunding(f), nil
}

// DeleteFunding implements v1.AdminServiceServer.
func (c *AdminController) DeleteFunding(ctx context.Context, req *v1.FundingRequest) (*v1.DeleteFundingResponse, error) {
	chainID, err := c.fundingAdmin(ctx, req.GetChainId())
	if err != nil {
		return nil, err
	}
	if err := c.funding.Delete(ctx, chainID, req.GetSigner(), callerID(ctx)); err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return &v1.DeleteFundingResponse{}, nil
}

// fundingAdmin allows the call for an admin and answers the chain it is about.
func (c *AdminController) fundingAdmin(ctx context.Context, chainID uint64) (uint64, error) {
	if err := requireAdmin(ctx); err != nil {
		return 0, err
	}
	if c.funding == nil {
		return 0, errNotAssembled
	}
	chain, err := c.chains.Lookup(chainID)
	if err != nil {
		return 0, ToAPIError(c.log, err)
	}
	return chain.ID, nil
}

func toAPIFunding(f domain.Funding) *v1.SignerFunding {
	out := &v1.SignerFunding{Signer: f.Signer.Hex(), ChainId: f.ChainID, LowWater: f.LowWater.String(), HighWater: f.HighWater.String(), Low: f.Low,
		Refills: f.Refills, UpdatedAt: timestamppb.New(f.UpdatedAt), UpdatedBy: f.UpdatedBy}
	if f.Treasury != nil {
		out.Treasury = f.Treasury.Hex()
	}
	if f.LastBalance != nil {
		out.LastBalance = f.LastBalance.String()
	}
	if f.RefillTxID != nil {
		out.RefillTxId = f.RefillTxID.String()
	}
	return out
}
