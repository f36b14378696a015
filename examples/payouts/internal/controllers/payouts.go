// Package controllers maps the payouts HTTP API (JSON) onto the use cases and their errors
// onto statuses with a stable reason. Thin: no rule lives here.
package controllers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	khttp "github.com/go-kratos/kratos/v2/transport/http"
	"github.com/google/uuid"
	"github.com/google/wire"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/services"
)

// ProviderSet builds the controllers.
var ProviderSet = wire.NewSet(NewPayoutController)

// maxBodyBytes bounds a create's body; a payout request is a few hundred bytes.
const maxBodyBytes = 16 << 10

// PayoutController serves /v1/payouts.
type PayoutController struct {
	payouts *services.PayoutService
	log     *log.Helper
}

// NewPayoutController builds the controller.
func NewPayoutController(payouts *services.PayoutService, logger log.Logger) *PayoutController {
	return &PayoutController{payouts: payouts, log: log.NewHelper(log.With(logger, "component", "http"))}
}

// Register adds the routes.
func (c *PayoutController) Register(r *khttp.Router) {
	r.POST("/v1/payouts", withMiddleware(c.Create))
	r.GET("/v1/payouts/{id}", withMiddleware(c.Get))
}

// withMiddleware runs h inside the server's middleware chain (recovery turns a panic into
// a 500 answer): Kratos applies it only to handlers that ask for it.
func withMiddleware(h khttp.HandlerFunc) khttp.HandlerFunc {
	return func(ctx khttp.Context) error {
		chain := ctx.Middleware(func(context.Context, any) (any, error) { return nil, h(ctx) })
		_, err := chain(ctx, nil)
		return err
	}
}

// CreatePayoutRequest is the body of POST /v1/payouts.
type CreatePayoutRequest struct {
	To     string `json:"to"`
	Amount string `json:"amount"`
}

// PayoutResponse is a payout as the API shows it.
type PayoutResponse struct {
	ID            string    `json:"id"`
	To            string    `json:"to"`
	Amount        string    `json:"amount"`
	Status        string    `json:"status"`
	TxID          string    `json:"txId,omitempty"`
	TxHash        string    `json:"txHash,omitempty"`
	FailureReason string    `json:"failureReason,omitempty"`
	CreatedAt     time.Time `json:"createdAt"`
	UpdatedAt     time.Time `json:"updatedAt"`
}

// Create answers 201 with the new payout, 200 for a replay of an Idempotency-Key.
func (c *PayoutController) Create(ctx khttp.Context) error {
	var req CreatePayoutRequest
	if err := decodeJSON(ctx.Request(), &req); err != nil {
		return err
	}
	newPayout, err := domain.ParseNewPayout(req.To, req.Amount, ctx.Header().Get("Idempotency-Key"))
	if err != nil {
		return c.httpError(err)
	}
	p, created, err := c.payouts.Create(ctx, newPayout)
	if err != nil {
		return c.httpError(err)
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	return ctx.JSON(status, toResponse(p))
}

// Get answers the payout, its transaction and hash once known.
func (c *PayoutController) Get(ctx khttp.Context) error {
	id, err := uuid.Parse(ctx.Vars().Get("id"))
	if err != nil {
		return kerrors.BadRequest("INVALID_ARGUMENT", "id must be a UUID")
	}
	p, err := c.payouts.Get(ctx, id)
	if err != nil {
		return c.httpError(err)
	}
	return ctx.JSON(http.StatusOK, toResponse(p))
}

// decodeJSON reads one JSON object with known fields only: a misspelt field is a client
// bug that would otherwise pass as an empty value.
func decodeJSON(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes+1))
	if err != nil {
		return kerrors.BadRequest("INVALID_JSON", "cannot read the request body")
	}
	if len(body) > maxBodyBytes {
		return kerrors.New(http.StatusRequestEntityTooLarge, "REQUEST_TOO_LARGE", fmt.Sprintf("body exceeds %d bytes", maxBodyBytes))
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return kerrors.BadRequest("INVALID_JSON", "body must be a JSON object {\"to\": \"0x...\", \"amount\": \"<wei>\"}: "+err.Error())
	}
	if dec.More() {
		return kerrors.BadRequest("INVALID_JSON", "body must hold one JSON object")
	}
	return nil
}

// httpError is the one mapping from use-case errors to HTTP answers. Database trouble is
// 503 (retry later), never 500: only a bug is.
func (c *PayoutController) httpError(err error) error {
	switch {
	case errors.Is(err, domain.ErrInvalidPayout):
		return kerrors.BadRequest("INVALID_ARGUMENT", err.Error())
	case errors.Is(err, domain.ErrPayoutNotFound):
		return kerrors.NotFound("NOT_FOUND", "no payout with this id")
	case errors.Is(err, domain.ErrIdempotencyConflict):
		return kerrors.Conflict("IDEMPOTENCY_CONFLICT", "Idempotency-Key was used for a different payout")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return kerrors.ServiceUnavailable("UNAVAILABLE", "request cancelled or timed out")
	}
	var connectErr *pgconn.ConnectError
	if errors.Is(err, txmanager.ErrRetryableTx) || errors.Is(err, txmanager.ErrTxTimeout) ||
		errors.Is(err, txmanager.ErrCommitOutcomeUnknown) || errors.As(err, &connectErr) {
		c.log.Warnw("msg", "database unavailable", "error", err.Error())
		return kerrors.ServiceUnavailable("UNAVAILABLE", "database unavailable, retry later")
	}
	c.log.Errorw("msg", "unexpected failure", "error", err.Error())
	return kerrors.InternalServer("INTERNAL", "internal error")
}

func toResponse(p domain.Payout) PayoutResponse {
	return PayoutResponse{
		ID: p.ID.String(), To: p.To, Amount: p.AmountWei, Status: string(p.Status), TxID: p.TxID,
		TxHash: p.TxHash, FailureReason: p.FailureReason, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
	}
}
