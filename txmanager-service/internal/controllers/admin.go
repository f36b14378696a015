package controllers

import (
	"context"

	"github.com/go-kratos/kratos/v2/log"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AdminController serves AdminService over gRPC and HTTP.
type AdminController struct {
	v1.UnimplementedAdminServiceServer
	admin     *services.AdminUseCase
	get       *services.GetTxUseCase
	routing   Routing
	forwarder OwnerForwarder
	log       *log.Helper
}

// NewAdminController wires the controller.
func NewAdminController(admin *services.AdminUseCase, get *services.GetTxUseCase, routing Routing, forwarder OwnerForwarder, logger log.Logger) *AdminController {
	return &AdminController{admin: admin, get: get, routing: routing, forwarder: forwarder, log: log.NewHelper(log.With(logger, "component", "admin-api"))}
}

// ResolveTx implements v1.AdminServiceServer. Resolution needs the signer's lease, so in
// forward mode it runs on the owner.
func (c *AdminController) ResolveTx(ctx context.Context, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	resp, err := route(ctx, c.routing,
		func() (*v1.ResolveTxResponse, error) { return c.resolveHere(ctx, req) },
		func(owner string) (*v1.ResolveTxResponse, error) { return c.forwarder.ForwardResolve(ctx, owner, req) })
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return resp, nil
}

func (c *AdminController) resolveHere(ctx context.Context, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	action, err := c.admin.ResolveTx(ctx, req.GetTxId(), req.GetAction(), req.GetReason())
	if err != nil {
		return nil, err
	}
	var tx domain.ManagedTx
	if tx, err = c.get.ByID(ctx, req.GetTxId()); err != nil {
		return nil, err
	}
	return &v1.ResolveTxResponse{TxId: req.GetTxId(), Action: string(action), Tx: toAPITx(tx)}, nil
}
