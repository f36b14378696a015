// HTTP bindings for TxService over Kratos transport/http, written by hand because the
// Kratos protoc-gen-go-http plugin is not available here. They use the same protobuf
// messages and operation names as gRPC, so middleware sees one API.

package v1

import (
	"context"
	"errors"
	"io"
	"mime"
	nethttp "net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-kratos/kratos/v2/transport/http"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
)

// TxServiceHTTPServer is what the HTTP routes call; the gRPC server implementation fits.
type TxServiceHTTPServer interface {
	CreateTx(context.Context, *CreateTxRequest) (*CreateTxResponse, error)
	CreateTxBatch(context.Context, *CreateTxBatchRequest) (*CreateTxBatchResponse, error)
	GetTx(context.Context, *GetTxRequest) (*Tx, error)
	GetTxByRequest(context.Context, *GetTxByRequestRequest) (*Tx, error)
	ListCompletions(context.Context, *ListCompletionsRequest) (*ListCompletionsResponse, error)
	ListApprovals(context.Context, *ListApprovalsRequest) (*ListApprovalsResponse, error)
	GetApproval(context.Context, *GetApprovalRequest) (*Approval, error)
	ApproveTx(context.Context, *DecideApprovalRequest) (*Approval, error)
	RejectTx(context.Context, *DecideApprovalRequest) (*Approval, error)
}

// HTTPOptions bound what the routes accept.
type HTTPOptions struct {
	// MaxBodyBytes caps a request body; a larger body is answered 400 REQUEST_TOO_LARGE.
	MaxBodyBytes int64
	// MaxBatchBodyBytes caps a batch of creates (BatchPath) instead.
	MaxBatchBodyBytes int64
}

// BatchPath is where a batch of creates is posted.
const BatchPath = "/api/v1/tx:batch"

// RegisterTxServiceHTTPServer adds the routes to s.
func RegisterTxServiceHTTPServer(s *http.Server, srv TxServiceHTTPServer, opts HTTPOptions) {
	r := s.Route("/")
	r.POST("/api/v1/tx", createTxHandler(srv, opts))
	r.POST(BatchPath, func(ctx http.Context) error {
		var in CreateTxBatchRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBatchBodyBytes, &in); err != nil {
			return err
		}
		return serve(ctx, TxService_CreateTxBatch_FullMethodName, &in, srv.CreateTxBatch)
	})
	// Static paths first: "by-request" and "completions" must not be read as a tx id.
	r.GET("/api/v1/tx/by-request", getTxByRequestHandler(srv))
	r.GET("/api/v1/tx/completions", listCompletionsHandler(srv))
	r.GET("/api/v1/tx/{tx_id}", getTxHandler(srv))
	r.GET("/api/v1/approvals", func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		in := ListApprovalsRequest{State: q.Get("state"), Signer: q.Get("signer"), Before: q.Get("before"), Limit: limit}
		return serve(ctx, TxService_ListApprovals_FullMethodName, &in, srv.ListApprovals)
	})
	r.GET("/api/v1/approvals/{approval_id}", func(ctx http.Context) error {
		in := GetApprovalRequest{ApprovalId: ctx.Vars().Get("approval_id")}
		return serve(ctx, TxService_GetApproval_FullMethodName, &in, srv.GetApproval)
	})
	decide := func(operation string, call func(context.Context, *DecideApprovalRequest) (*Approval, error)) http.HandlerFunc {
		return func(ctx http.Context) error {
			var in DecideApprovalRequest
			// The body is optional (a note); the path names the approval.
			if ctx.Request().ContentLength != 0 {
				if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
					return err
				}
			}
			in.ApprovalId = ctx.Vars().Get("approval_id")
			return serve(ctx, operation, &in, call)
		}
	}
	r.POST("/api/v1/approvals/{approval_id}/approve", decide(TxService_ApproveTx_FullMethodName, srv.ApproveTx))
	r.POST("/api/v1/approvals/{approval_id}/reject", decide(TxService_RejectTx_FullMethodName, srv.RejectTx))
}

func createTxHandler(srv TxServiceHTTPServer, opts HTTPOptions) http.HandlerFunc {
	return func(ctx http.Context) error {
		var in CreateTxRequest
		if err := DecodeJSONBody(ctx.Request(), opts.MaxBodyBytes, &in); err != nil {
			return err
		}
		reply, err := invoke(ctx, TxService_CreateTx_FullMethodName, &in, srv.CreateTx)
		if err != nil {
			return err
		}
		status := nethttp.StatusOK
		if reply.GetCreated() {
			status = nethttp.StatusAccepted
		}
		return ctx.Result(status, reply)
	}
}

func getTxHandler(srv TxServiceHTTPServer) http.HandlerFunc {
	return func(ctx http.Context) error {
		wait, err := queryWait(ctx.Request().URL.Query())
		if err != nil {
			return err
		}
		in := GetTxRequest{TxId: ctx.Vars().Get("tx_id"), Wait: wait}
		return serve(ctx, TxService_GetTx_FullMethodName, &in, srv.GetTx)
	}
}

func getTxByRequestHandler(srv TxServiceHTTPServer) http.HandlerFunc {
	return func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		wait, err := queryWait(q)
		if err != nil {
			return err
		}
		in := GetTxByRequestRequest{Signer: q.Get("signer"), RequestId: q.Get("requestId"), ChainId: chainID, Wait: wait}
		if in.RequestId == "" {
			in.RequestId = q.Get("request_id")
		}
		return serve(ctx, TxService_GetTxByRequest_FullMethodName, &in, srv.GetTxByRequest)
	}
}

func listCompletionsHandler(srv TxServiceHTTPServer) http.HandlerFunc {
	return func(ctx http.Context) error {
		q := ctx.Request().URL.Query()
		limit, err := queryLimit(q)
		if err != nil {
			return err
		}
		wait, err := queryWait(q)
		if err != nil {
			return err
		}
		chainID, err := queryChainID(q)
		if err != nil {
			return err
		}
		in := ListCompletionsRequest{After: q.Get("after"), Limit: limit, Wait: wait, ChainId: chainID}
		return serve(ctx, TxService_ListCompletions_FullMethodName, &in, srv.ListCompletions)
	}
}

// invoke runs call for in through the server's middleware chain under operation, the gRPC
// method name, so middleware sees one API on both transports.
func invoke[In, Out any](ctx http.Context, operation string, in *In, call func(context.Context, *In) (Out, error)) (Out, error) {
	http.SetOperation(ctx, operation)
	out, err := ctx.Middleware(func(c context.Context, req any) (any, error) { return call(c, req.(*In)) })(ctx, in)
	reply, _ := out.(Out)
	return reply, err
}

// serve is invoke answered with 200.
func serve[In, Out any](ctx http.Context, operation string, in *In, call func(context.Context, *In) (Out, error)) error {
	out, err := invoke(ctx, operation, in, call)
	if err != nil {
		return err
	}
	return ctx.Result(nethttp.StatusOK, out)
}

// queryChainID reads the optional chain id ("chainId" or "chain_id"); 0 when absent.
func queryChainID(q url.Values) (uint64, error) {
	raw := q.Get("chainId")
	if raw == "" {
		raw = q.Get("chain_id")
	}
	if raw == "" {
		return 0, nil
	}
	id, err := strconv.ParseUint(raw, 10, 64)
	if err != nil || id == 0 {
		return 0, InvalidArgument("chainId", "must be a positive integer chain id")
	}
	return id, nil
}

// queryLimit reads the optional "limit" query parameter; 0 when it is absent.
func queryLimit(q url.Values) (uint32, error) {
	raw := q.Get("limit")
	if raw == "" {
		return 0, nil
	}
	limit, err := strconv.ParseUint(raw, 10, 32)
	if err != nil {
		return 0, InvalidArgument("limit", "must be a positive integer")
	}
	return uint32(limit), nil
}

// queryWait reads the long-poll bound: a duration ("10s", "500ms") or whole seconds.
func queryWait(q url.Values) (*durationpb.Duration, error) {
	raw := q.Get("wait")
	if raw == "" {
		return nil, nil
	}
	if seconds, err := strconv.ParseUint(raw, 10, 32); err == nil {
		return durationpb.New(time.Duration(seconds) * time.Second), nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil || d < 0 {
		return nil, InvalidArgument("wait", "must be a duration such as 10s, or whole seconds")
	}
	return durationpb.New(d), nil
}

// strictJSON rejects unknown fields (a misspelt "gasLimt" must not be silently dropped) and,
// like every protojson decoder, duplicate fields and wrong types.
var strictJSON = protojson.UnmarshalOptions{DiscardUnknown: false}

// DecodeJSONBody reads at most maxBytes of r's body and decodes it strictly into msg. Every
// failure is a 400 with reason INVALID_ARGUMENT or REQUEST_TOO_LARGE, except a body that is
// not declared as JSON: 415. Requiring the JSON content type also keeps browsers from
// posting here cross-site without a CORS preflight (text/plain and form posts need none).
func DecodeJSONBody(r *nethttp.Request, maxBytes int64, msg proto.Message) error {
	if mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mediaType != "application/json" {
		return ErrorUnsupportedMediaType("Content-Type: the body must be sent as application/json").
			WithMetadata(map[string]string{"field": "Content-Type"})
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBytes+1))
	if err != nil {
		var tooLarge *nethttp.MaxBytesError
		if errors.As(err, &tooLarge) {
			return RequestTooLarge(maxBytes)
		}
		return InvalidArgument("body", "could not be read")
	}
	if int64(len(body)) > maxBytes {
		return RequestTooLarge(maxBytes)
	}
	if len(body) == 0 {
		return InvalidArgument("body", "a JSON object is required")
	}
	if fast, ok := msg.(jsonFastDecoder); ok && fast.decodeJSONFast(body) {
		return nil
	}
	if err := strictJSON.Unmarshal(body, msg); err != nil {
		return InvalidArgument("body", "malformed JSON: "+err.Error())
	}
	return nil
}

// InvalidArgument is the API's answer to a malformed field: 400 INVALID_ARGUMENT naming it.
func InvalidArgument(field, reason string) error {
	return ErrorInvalidArgument("%s: %s", field, reason).WithMetadata(map[string]string{"field": field})
}

// RequestTooLarge is the API's answer to a body over maxBytes.
func RequestTooLarge(maxBytes int64) error {
	return ErrorRequestTooLarge("request body exceeds %d bytes", maxBytes)
}
