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
	admin *services.AdminUseCase
	get   *services.GetTxUseCase
	log   *log.Helper
}

// NewAdminController wires the controller.
func NewAdminController(admin *services.AdminUseCase, get *services.GetTxUseCase, logger log.Logger) *AdminController {
	return &AdminController{admin: admin, get: get, log: log.NewHelper(log.With(logger, "component", "admin-api"))}
}

// ResolveTx implements v1.AdminServiceServer.
func (c *AdminController) ResolveTx(ctx context.Context, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	action, err := c.admin.ResolveTx(ctx, req.GetTxId(), req.GetAction(), req.GetReason())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	var tx domain.ManagedTx
	if tx, err = c.get.ByID(ctx, req.GetTxId()); err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return &v1.ResolveTxResponse{TxId: req.GetTxId(), Action: string(action), Tx: toAPITx(tx)}, nil
}
