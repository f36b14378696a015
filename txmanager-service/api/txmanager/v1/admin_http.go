// HTTP bindings for AdminService over Kratos transport/http (hand-written; see
// txmanager_http.go for why).

package v1

import (
	"context"
	nethttp "net/http"
	"strconv"

	"github.com/go-kratos/kratos/v2/transport/http"
)

// AdminServiceHTTPServer is what the admin routes call.
type AdminServiceHTTPServer interface {
	ResolveTx(context.Context, *ResolveTxRequest) (*ResolveTxResponse, error)
	GetSignerStatus(context.Context, *GetSignerStatusRequest) (*SignerStatus, error)
	ListStuck(context.Context, *ListStuckRequest) (*ListStuckResponse, error)
	ListNodes(context.Context, *ListNodesRequest) (*ListNodesResponse, error)
}

// RegisterAdminServiceHTTPServer adds the admin routes to s.
func RegisterAdminServiceHTTPServer(s *http.Server, srv AdminServiceHTTPServer, opts HTTPOptions) {
	r := s.Route("/")
	r.POST("/api/v1/admin/tx/{tx_id}/resolve", func(ctx http.Context) error {
		var in ResolveTxRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.TxId = ctx.Vars().Get("tx_id")
		http.SetOperation(ctx, AdminService_ResolveTx_FullMethodName)
		h := ctx.Middleware(func(ctx context.Context, req any) (any, error) {
			return srv.ResolveTx(ctx, req.(*ResolveTxRequest))
		})
		out, err := h(ctx, &in)
		if err != nil {
			return err
		}
		return ctx.Result(nethttp.StatusOK, out)
	})
	r.GET("/api/v1/admin/signers/{signer}", func(ctx http.Context) error {
		in := GetSignerStatusRequest{Signer: ctx.Vars().Get("signer")}
		http.SetOperation(ctx, AdminService_GetSignerStatus_FullMethodName)
		return serve(ctx, &in, func(c context.Context, req any) (any, error) {
			return srv.GetSignerStatus(c, req.(*GetSignerStatusRequest))
		})
	})
	r.GET("/api/v1/admin/stuck", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		in := ListStuckRequest{Signer: q.Get("signer")}
		if raw := q.Get("limit"); raw != "" {
			limit, err := strconv.ParseUint(raw, 10, 32)
			if err != nil {
				return invalidArgument("limit", "must be a positive integer")
			}
			in.Limit = uint32(limit)
		}
		http.SetOperation(ctx, AdminService_ListStuck_FullMethodName)
		return serve(ctx, &in, func(c context.Context, req any) (any, error) { return srv.ListStuck(c, req.(*ListStuckRequest)) })
	})
	r.GET("/api/v1/admin/nodes", func(ctx http.Context) error {
		in := ListNodesRequest{}
		http.SetOperation(ctx, AdminService_ListNodes_FullMethodName)
		return serve(ctx, &in, func(c context.Context, req any) (any, error) { return srv.ListNodes(c, req.(*ListNodesRequest)) })
	})
}

// serve runs a GET through the middleware chain and writes the answer.
func serve(ctx http.Context, in any, call func(context.Context, any) (any, error)) error {
	out, err := ctx.Middleware(call)(ctx, in)
	if err != nil {
		return err
	}
	return ctx.Result(nethttp.StatusOK, out)
}
