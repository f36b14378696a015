// HTTP bindings for AdminService over Kratos transport/http (hand-written; see
// txmanager_http.go for why).

package v1

import (
	"context"
	"strconv"

	"github.com/go-kratos/kratos/v2/transport/http"
)

// AdminServiceHTTPServer is what the admin routes call.
type AdminServiceHTTPServer interface {
	ResolveTx(context.Context, *ResolveTxRequest) (*ResolveTxResponse, error)
	GetSignerStatus(context.Context, *GetSignerStatusRequest) (*SignerStatus, error)
	ListSigners(context.Context, *ListSignersRequest) (*ListSignersResponse, error)
	ListStuck(context.Context, *ListStuckRequest) (*ListStuckResponse, error)
	ListNodes(context.Context, *ListNodesRequest) (*ListNodesResponse, error)
	GetQuarantine(context.Context, *GetQuarantineRequest) (*Quarantine, error)
	ReleaseSigner(context.Context, *ReleaseSignerRequest) (*Quarantine, error)
	AddSigner(context.Context, *AddSignerRequest) (*RosterSigner, error)
	RetireSigner(context.Context, *RetireSignerRequest) (*RosterSigner, error)
	ListRoster(context.Context, *ListRosterRequest) (*ListRosterResponse, error)
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
		return serve(ctx, AdminService_ResolveTx_FullMethodName, &in, srv.ResolveTx)
	})
	r.GET("/api/v1/admin/signers/{signer}", func(ctx http.Context) error {
		chainID, err := queryChainID(ctx.Request().URL.Query())
		if err != nil {
			return err
		}
		in := GetSignerStatusRequest{Signer: ctx.Vars().Get("signer"), ChainId: chainID}
		return serve(ctx, AdminService_GetSignerStatus_FullMethodName, &in, srv.GetSignerStatus)
	})
	r.GET("/api/v1/admin/signers", func(ctx http.Context) error {
		chainID, err := queryChainID(ctx.Request().URL.Query())
		if err != nil {
			return err
		}
		return serve(ctx, AdminService_ListSigners_FullMethodName, &ListSignersRequest{ChainId: chainID}, srv.ListSigners)
	})
	r.GET("/api/v1/admin/stuck", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		in := ListStuckRequest{Signer: q.Get("signer"), Limit: limit, ChainId: chainID}
		return serve(ctx, AdminService_ListStuck_FullMethodName, &in, srv.ListStuck)
	})
	r.GET("/api/v1/admin/nodes", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListNodes_FullMethodName, &ListNodesRequest{}, srv.ListNodes)
	})
	r.GET("/api/v1/admin/signers/{signer}/quarantine", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		in := GetQuarantineRequest{Signer: ctx.Vars().Get("signer"), Limit: limit, ChainId: chainID}
		// fromNonce is the proto JSON name (the OpenAPI document's); from_nonce is older.
		raw, name := q.Get("fromNonce"), "fromNonce"
		if raw == "" {
			raw, name = q.Get("from_nonce"), "from_nonce"
		}
		if raw != "" {
			if in.FromNonce, err = strconv.ParseUint(raw, 10, 64); err != nil {
				return InvalidArgument(name, "must be a non-negative integer")
			}
		}
		if raw := q.Get("nonces"); raw != "" {
			if in.ListNonces, err = strconv.ParseBool(raw); err != nil {
				return InvalidArgument("nonces", "must be true or false")
			}
		}
		return serve(ctx, AdminService_GetQuarantine_FullMethodName, &in, srv.GetQuarantine)
	})
	r.POST("/api/v1/admin/signers/{signer}/release", func(ctx http.Context) error {
		var in ReleaseSignerRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.Signer = ctx.Vars().Get("signer")
		if chainID, err := queryChainID(ctx.Request().URL.Query()); err != nil {
			return err
		} else if chainID != 0 {
			in.ChainId = chainID
		}
		return serve(ctx, AdminService_ReleaseSigner_FullMethodName, &in, srv.ReleaseSigner)
	})
	r.POST("/api/v1/admin/roster", func(ctx http.Context) error {
		var in AddSignerRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		return serve(ctx, AdminService_AddSigner_FullMethodName, &in, srv.AddSigner)
	})
	r.POST("/api/v1/admin/roster/{signer}/retire", func(ctx http.Context) error {
		var in RetireSignerRequest
		if ctx.Request().ContentLength != 0 {
			if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
				return err
			}
		}
		in.Signer = ctx.Vars().Get("signer")
		return serve(ctx, AdminService_RetireSigner_FullMethodName, &in, srv.RetireSigner)
	})
	r.GET("/api/v1/admin/roster", func(ctx http.Context) error {
		return serve(ctx, AdminService_ListRoster_FullMethodName, &ListRosterRequest{}, srv.ListRoster)
	})
}
