package controllers

import (
	"context"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AdminController serves AdminService over gRPC and HTTP.
type AdminController struct {
	v1.UnimplementedAdminServiceServer
	chains    *services.Chains
	routing   Routing
	forwarder OwnerForwarder
	roster    *services.SignerRoster
	policies  *services.PolicyBook
	audit     *services.AuditTrail
	webhooks  *services.WebhookBook
	funding   *services.FundingBook
	log       *log.Helper
}

// NewAdminController wires the controller.
func NewAdminController(chains *services.Chains, routing Routing, forwarder OwnerForwarder, roster *services.SignerRoster, policies *services.PolicyBook,
	audit *services.AuditTrail, webhooks *services.WebhookBook, funding *services.FundingBook, logger log.Logger) *AdminController {
	return &AdminController{chains: chains, routing: routing, forwarder: forwarder, roster: roster, policies: policies, audit: audit, webhooks: webhooks, funding: funding,
		log: log.NewHelper(log.With(logger, "component", "admin-api"))}
}

// ResolveTx implements v1.AdminServiceServer. Resolution needs the signer's lease, so in
// forward mode it runs on the owner.
func (c *AdminController) ResolveTx(ctx context.Context, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	resp, err := route(ctx, c.routing,
		func() (*v1.ResolveTxResponse, error) { return c.resolveHere(ctx, req) },
		func(owner string) (*v1.ResolveTxResponse, error) { return c.forwarder.ForwardResolve(ctx, owner, req) })
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return resp, nil
}

func (c *AdminController) resolveHere(ctx context.Context, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	// A transaction is resolved by its own chain's pipeline.
	tx, err := c.chains.Any().Get.ByID(ctx, req.GetTxId())
	if err != nil {
		return nil, err
	}
	if !granted(ctx, tx.SignerHex) {
		// As for a caller's own look-up of another signer's transaction: not found.
		return nil, v1.ErrorNotFound("transaction not found")
	}
	chain, err := c.chains.Lookup(tx.ChainID)
	if err != nil {
		return nil, err
	}
	action, err := chain.Admin.ResolveTx(ctx, req.GetTxId(), req.GetAction(), req.GetReason())
	if err != nil {
		return nil, err
	}
	c.audit.RecordAfter(ctx, callerID(ctx), domain.AuditTxResolved, "tx "+req.GetTxId(), map[string]any{"state": string(tx.State), "nonce": tx.Nonce, "signer": tx.SignerHex},
		map[string]any{"action": string(action), "reason": req.GetReason()})
	if tx, err = chain.Get.ByID(ctx, req.GetTxId()); err != nil {
		return nil, err
	}
	return &v1.ResolveTxResponse{TxId: req.GetTxId(), Action: string(action), Tx: toAPITx(tx)}, nil
}

// GetSignerStatus implements v1.AdminServiceServer.
func (c *AdminController) GetSignerStatus(ctx context.Context, req *v1.GetSignerStatusRequest) (*v1.SignerStatus, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	s, err := chain.Admin.SignerStatus(ctx, req.GetSigner())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPISignerStatus(chain.ID, s, chain.Admin.RecoverByIntent()), nil
}

// ListSigners implements v1.AdminServiceServer: every chain's signers, or one chain's.
func (c *AdminController) ListSigners(ctx context.Context, req *v1.ListSignersRequest) (*v1.ListSignersResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	ids := c.chains.IDs()
	if req.GetChainId() != 0 {
		if _, err := c.chains.Lookup(req.GetChainId()); err != nil {
			return nil, ToAPIError(c.log, err)
		}
		ids = []uint64{req.GetChainId()}
	}
	out := &v1.ListSignersResponse{}
	for _, id := range ids {
		chain, err := c.chains.Lookup(id)
		if err != nil {
			return nil, ToAPIError(c.log, err)
		}
		statuses, err := chain.Admin.Signers(ctx)
		if err != nil {
			return nil, ToAPIError(c.log, err)
		}
		for _, s := range statuses {
			if granted(ctx, s.Signer) {
				out.Signers = append(out.Signers, toAPISignerStatus(chain.ID, s, chain.Admin.RecoverByIntent()))
			}
		}
	}
	return out, nil
}

func toAPISignerStatus(chainID uint64, s services.SignerStatus, recoverByIntent bool) *v1.SignerStatus {
	c := s.Condition
	out := &v1.SignerStatus{
		ChainId: chainID, Signer: s.Signer, LeaseOwner: s.LeaseOwner, FencingToken: s.FencingToken, LeaseExpiresAt: timestamppb.New(s.LeaseExpiresAt),
		LeaseLive: s.LeaseLive, NextNonce: s.NextNonce, PendingDepth: uint64(s.PendingDepth),
		OldestPendingAgeSeconds: s.OldestPendingAgeSeconds, StuckCount: uint64(s.StuckCount), Quarantined: s.Quarantined,
		Recovering: c.Recovering(recoverByIntent), UnrecordedNonces: c.UnrecordedNonces, SigningError: c.SigningError,
		Unsigned: uint64(c.Unsigned), OldestUnsignedAgeSeconds: c.OldestUnsignedAgeSeconds, Serving: c.CanServe(),
	}
	if c.SigningFailingSince != nil {
		out.SigningFailingSince = timestamppb.New(*c.SigningFailingSince)
	}
	return out
}

// ListStuck implements v1.AdminServiceServer.
func (c *AdminController) ListStuck(ctx context.Context, req *v1.ListStuckRequest) (*v1.ListStuckResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	if req.GetSigner() != "" {
		if err := requireSigner(ctx, req.GetSigner()); err != nil {
			return nil, err
		}
	}
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	txs, err := chain.Admin.ListStuck(ctx, req.GetSigner(), int(req.GetLimit()))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListStuckResponse{Txs: make([]*v1.Tx, 0, len(txs))}
	for _, tx := range txs {
		if granted(ctx, tx.SignerHex) {
			out.Txs = append(out.Txs, toAPITx(tx))
		}
	}
	return out, nil
}

// ListNodes implements v1.AdminServiceServer.
func (c *AdminController) ListNodes(ctx context.Context, _ *v1.ListNodesRequest) (*v1.ListNodesResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	nodes, err := c.chains.Any().Admin.ListNodes(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListNodesResponse{Nodes: make([]*v1.Node, 0, len(nodes))}
	for _, n := range nodes {
		out.Nodes = append(out.Nodes, &v1.Node{
			NodeId: n.ID, Incarnation: n.Incarnation, GrpcAddr: n.GRPCAddr, HttpAddr: n.HTTPAddr, Version: n.Version,
			StartedAt: timestamppb.New(n.StartedAt), HeartbeatAt: timestamppb.New(n.HeartbeatAt), Alive: n.Alive, Leases: uint64(n.Leases),
		})
	}
	return out, nil
}

// GetQuarantine implements v1.AdminServiceServer.
func (c *AdminController) GetQuarantine(ctx context.Context, req *v1.GetQuarantineRequest) (*v1.Quarantine, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	q, err := chain.Admin.GetQuarantine(ctx, req.GetSigner(), req.GetFromNonce(), int(req.GetLimit()), req.GetListNonces())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIQuarantine(chain.ID, q), nil
}

// ReleaseSigner implements v1.AdminServiceServer.
func (c *AdminController) ReleaseSigner(ctx context.Context, req *v1.ReleaseSignerRequest) (*v1.Quarantine, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	q, err := chain.Admin.ReleaseSigner(ctx, req.GetSigner(), req.GetNote())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	c.audit.RecordAfter(ctx, callerID(ctx), domain.AuditSignerReleased, "signer "+q.Signer, map[string]any{"chainId": chain.ID, "quarantined": true},
		map[string]any{"chainId": chain.ID, "quarantined": q.Quarantined, "note": req.GetNote()})
	return toAPIQuarantine(chain.ID, q), nil
}

func toAPIQuarantine(chainID uint64, q services.Quarantine) *v1.Quarantine {
	out := &v1.Quarantine{
		ChainId: chainID, Signer: q.Signer, Quarantined: q.Quarantined, DbNextNonce: q.DBNextNonce, ChainNonce: q.ChainNonce,
		DetectedBy: q.DetectedBy, ReleasedBy: q.ReleasedBy, ReleaseNote: q.ReleaseNote, NextFromNonce: q.NextFromNonce,
		RecordedTo: q.RecordedTo, Recorded: uint64(q.Recorded), ReleaseRequestedBy: q.ReleaseRequestedBy,
	}
	if !q.DetectedAt.IsZero() {
		out.DetectedAt = timestamppb.New(q.DetectedAt)
	}
	if q.ReleasedAt != nil {
		out.ReleasedAt = timestamppb.New(*q.ReleasedAt)
	}
	if q.ReleaseRequestedAt != nil {
		out.ReleaseRequestedAt = timestamppb.New(*q.ReleaseRequestedAt)
	}
	for _, r := range q.Ranges {
		out.Ranges = append(out.Ranges, &v1.NonceRange{Class: r.Class, FirstNonce: r.First, LastNonce: r.Last, Count: r.Count})
	}
	for _, u := range q.Unknown {
		item := &v1.UnknownNonce{Nonce: u.Nonce}
		if u.Tx != nil {
			item.Found, item.TxHash, item.BlockNumber, item.GasLimit = true, u.Tx.Hash.Hex(), u.Tx.BlockNumber, u.Tx.Gas
			item.Value, item.Data, item.DataDigest = u.Tx.Value.String(), hexutil.Encode(u.Tx.Data), crypto.Keccak256Hash(u.Tx.Data).Hex()
			if u.Tx.To != nil {
				item.To = u.Tx.To.Hex()
			}
		}
		if r := u.Recovered; r != nil {
			item.RecoveredTxId, item.Adopted, item.AdoptedByRequestId = r.TxID.String(), r.RequestID != "", r.RequestID
			if r.UnclaimedUntil != nil {
				item.UnclaimedUntil = timestamppb.New(*r.UnclaimedUntil)
			}
		}
		out.UnknownNonces = append(out.UnknownNonces, item)
	}
	return out
}
