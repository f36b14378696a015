// HTTP bindings for AdminService over Kratos transport/http (hand-written; see
// txmanager_http.go for why).

package v1

import (
	"context"
	nethttp "net/http"

	"github.com/go-kratos/kratos/v2/transport/http"
)

// AdminServiceHTTPServer is what the admin routes call.
type AdminServiceHTTPServer interface {
	ResolveTx(context.Context, *ResolveTxRequest) (*ResolveTxResponse, error)
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
}
