package server

import (
	"context"
	"errors"
	"net/http"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// NewGRPCServer serves the API over gRPC.
func NewGRPCServer(c *conf.Bootstrap, listeners *Listeners, tx *controllers.TxController, admin *controllers.AdminController, mw *Middleware) *kgrpc.Server {
	srv := kgrpc.NewServer(
		kgrpc.Listener(listeners.GRPC),
		kgrpc.Timeout(c.Server.GRPC.Timeout.Std()),
		kgrpc.Middleware(mw.chain...),
		kgrpc.UnaryInterceptor(grpcStatusInterceptor),
		kgrpc.Options(grpc.MaxRecvMsgSize(int(c.Server.MaxBodyBytes))),
	)
	v1.RegisterTxServiceServer(srv, tx)
	v1.RegisterAdminServiceServer(srv, admin)
	return srv
}

// Kratos sends 422 as gRPC Unknown; the service sends it as FailedPrecondition, which no
// other API status maps to, and a forwarding node reads it back as 422 (see fromPeer).
const unprocessableGRPCCode = codes.FailedPrecondition

func grpcStatusInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	var kerr *kerrors.Error
	if err == nil || !errors.As(err, &kerr) || kerr.Code != http.StatusUnprocessableEntity {
		return resp, err
	}
	// The reason and metadata travel unchanged in ErrorInfo.
	st, detailErr := status.New(unprocessableGRPCCode, kerr.Message).WithDetails(&errdetails.ErrorInfo{Reason: kerr.Reason, Metadata: kerr.Metadata})
	if detailErr != nil {
		return resp, err
	}
	return resp, st.Err()
}

func recoveryHandler(logger log.Logger) func(ctx context.Context, req, panicValue any) error {
	helper := log.NewHelper(logger)
	return func(ctx context.Context, req, panicValue any) error {
		helper.Errorw("msg", "panic while serving a request", "panic", panicValue)
		return kerrors.New(http.StatusInternalServerError, v1.ErrorReason_INTERNAL.String(), "internal error")
	}
}
