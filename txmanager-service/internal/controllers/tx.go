package controllers

import (
	"context"
	"errors"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/go-kratos/kratos/v2/log"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// TxController serves TxService over gRPC and HTTP.
type TxController struct {
	v1.UnimplementedTxServiceServer
	chains      *services.Chains
	completions *services.CompletionsUseCase
	finalWait   *services.FinalWait
	standby     *services.StandbyWait
	approvals   *services.ApprovalDesk
	routing     Routing
	forwarder   OwnerForwarder
	log         *log.Helper
}

// NewTxController wires the controller.
func NewTxController(chains *services.Chains, completions *services.CompletionsUseCase, finalWait *services.FinalWait, standby *services.StandbyWait,
	approvals *services.ApprovalDesk, routing Routing, forwarder OwnerForwarder, logger log.Logger) *TxController {
	return &TxController{chains: chains, completions: completions, finalWait: finalWait, standby: standby, approvals: approvals, routing: routing,
		forwarder: forwarder, log: log.NewHelper(log.With(logger, "component", "api"))}
}

// CreateTx implements v1.TxServiceServer.
func (c *TxController) CreateTx(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	if err := requireSigner(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	resp, err := route(ctx, c.routing,
		func() (*v1.CreateTxResponse, error) { return c.createHere(ctx, req) },
		func(owner string) (*v1.CreateTxResponse, error) { return forwardCreate(ctx, c.forwarder, owner, req) })
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return resp, nil
}

// forwardCreate forwards req to the signer's owner. A create without a requestId that
// reached the owner unanswered is not tried again: the owner may have made it, and a second
// create could not be told from the first (the caller is told OUTCOME_UNKNOWN). One with a
// requestId is: its retry is a replay wherever it lands.
func forwardCreate(ctx context.Context, forwarder OwnerForwarder, owner string, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	resp, err := forwarder.ForwardCreate(ctx, owner, req)
	if err != nil && req.GetRequestId() == "" && errors.Is(err, domain.ErrSentUnanswered) {
		return nil, &unansweredCreate{err: err}
	}
	return resp, err
}

// unansweredCreate is a create without a requestId that the signer's owner received and did
// not answer. It is ErrOutcomeUnknown to errors.Is, and not the cause's ErrUnavailable:
// routing must not take it for an owner worth trying again.
type unansweredCreate struct{ err error }

func (e *unansweredCreate) Error() string {
	return "the create went to the signer's owner, which did not answer: it may have been made, and without a requestId a second create could not be told from it, so it was not sent again: " + e.err.Error()
}

func (e *unansweredCreate) Unwrap() error { return domain.ErrOutcomeUnknown }

func (c *TxController) createHere(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, err
	}
	res, err := chain.Create.Create(ctx, domain.CreateInput{
		Signer:               req.GetSigner(),
		RequestID:            req.GetRequestId(),
		To:                   req.GetTo(),
		Value:                req.GetValue(),
		Data:                 req.GetData(),
		GasLimit:             req.GetGasLimit(),
		MaxFeePerGas:         req.GetMaxFeePerGas(),
		MaxPriorityFeePerGas: req.GetMaxPriorityFeePerGas(),
	})
	if err != nil {
		return nil, err
	}
	return &v1.CreateTxResponse{Tx: toAPITx(res.Tx), Created: res.Created}, nil
}

// GetTx implements v1.TxServiceServer.
func (c *TxController) GetTx(ctx context.Context, req *v1.GetTxRequest) (*v1.Tx, error) {
	get := c.chains.Any().Get
	return c.readTx(ctx, req.GetWait(), func(ctx context.Context) (domain.ManagedTx, error) {
		tx, err := get.ByID(ctx, req.GetTxId())
		if errors.Is(err, domain.ErrNotFound) && c.approvals != nil {
			// An intent waiting for approval has no transaction row yet: its approval
			// answers under the same id. One admitted as a transaction the chain held
			// already (adopted after a restore) answers with that transaction.
			waiting, err := c.approvals.TxByID(ctx, req.GetTxId())
			if err != nil {
				return tx, domain.ErrNotFound
			}
			if waiting.ID.String() != req.GetTxId() {
				return get.ByID(ctx, waiting.ID.String())
			}
			return waiting, nil
		}
		return tx, err
	})
}

// readTx answers a read of one transaction, waiting for it to become final when the
// caller asked to (a long-poll); the caller's grant is checked before any wait. The answer
// is given once it is on the database's synchronous standby (services.StandbyWait).
func (c *TxController) readTx(ctx context.Context, wait *durationpb.Duration, read func(context.Context) (domain.ManagedTx, error)) (*v1.Tx, error) {
	d, err := waitOf(wait)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	tx, err := read(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	if err := requireGrant(ctx, tx.Signer, tx.SignerText()); err != nil {
		return nil, err
	}
	if d > 0 && !tx.State.Final() {
		if tx, err = c.finalWait.Read(ctx, d, read); err != nil {
			return nil, ToAPIError(c.log, err)
		}
	}
	// Once, on the answer given: the long-poll's earlier looks are not shown to anyone.
	if err := c.standby.Read(ctx, "the transaction"); err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPITx(tx), nil
}

// waitOf is a request's long-poll bound (0 when it asks for none).
func waitOf(wait *durationpb.Duration) (time.Duration, error) {
	if wait == nil {
		return 0, nil
	}
	if err := wait.CheckValid(); err != nil {
		return 0, &domain.ValidationError{Field: "wait", Reason: "not a duration"}
	}
	return wait.AsDuration(), nil
}

// GetTxByRequest implements v1.TxServiceServer.
func (c *TxController) GetTxByRequest(ctx context.Context, req *v1.GetTxByRequestRequest) (*v1.Tx, error) {
	if err := requireSigner(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	chain, err := c.chains.Lookup(req.GetChainId())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	// An intent held for approval is read under its request id as well.
	return c.readTx(ctx, req.GetWait(), func(ctx context.Context) (domain.ManagedTx, error) {
		return chain.Get.ByRequestID(ctx, req.GetSigner(), req.GetRequestId())
	})
}

// ListCompletions implements v1.TxServiceServer.
func (c *TxController) ListCompletions(ctx context.Context, req *v1.ListCompletionsRequest) (*v1.ListCompletionsResponse, error) {
	p, err := principal(ctx)
	if err != nil {
		return nil, err
	}
	wait, err := waitOf(req.GetWait())
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	// A caller sees the completions of its own signers only.
	if id := req.GetChainId(); id != 0 {
		if _, err := c.chains.Lookup(id); err != nil {
			return nil, ToAPIError(c.log, err)
		}
	}
	page, err := c.completions.List(ctx, req.GetAfter(), int(req.GetLimit()), p.SignerFilter(), req.GetChainId(), wait)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListCompletionsResponse{Next: page.Next, Completions: make([]*v1.Completion, 0, len(page.Completions))}
	for _, cpl := range page.Completions {
		out.Completions = append(out.Completions, toAPICompletion(cpl))
	}
	return out, nil
}

// watchPage is how many completions the stream reads at a time, and watchWait how long
// one read waits for new ones before looking again (at most feed.maxWait); with long-polls
// turned off (feed.maxWait 0), an empty read is followed by watchIdle before the next.
const (
	watchPage = 100
	watchWait = 25 * time.Second
	watchIdle = time.Second
)

// WatchCompletions implements v1.TxServiceServer: the feed as a stream, from the cursor
// on, until the client goes away.
func (c *TxController) WatchCompletions(req *v1.WatchCompletionsRequest, stream v1.TxService_WatchCompletionsServer) error {
	ctx := stream.Context()
	p, err := principal(ctx)
	if err != nil {
		return err
	}
	cursor := req.GetAfter()
	wait := min(watchWait, c.completions.MaxWait())
	for ctx.Err() == nil {
		page, err := c.completions.List(ctx, cursor, watchPage, p.SignerFilter(), 0, wait)
		if err != nil {
			return ToAPIError(c.log, err)
		}
		if len(page.Completions) == 0 && wait == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(watchIdle):
			}
		}
		last := cursor
		for _, cpl := range page.Completions {
			if err := stream.Send(toAPICompletion(cpl)); err != nil {
				return err
			}
			last = cpl.Position.String()
		}
		if page.Next != last {
			// The page moved past completions the caller's signers did not have: a mark
			// carrying the cursor alone, so a client whose signers are quiet resumes from
			// here, not from a position retention may delete.
			if err := stream.Send(&v1.Completion{Cursor: page.Next}); err != nil {
				return err
			}
		}
		cursor = page.Next
	}
	return nil
}

func toAPICompletion(cpl services.Completion) *v1.Completion {
	item := &v1.Completion{
		ChainId:     cpl.ChainID,
		TxId:        cpl.TxID.String(),
		Signer:      cpl.Signer.Hex(),
		Nonce:       cpl.Nonce,
		Status:      string(cpl.Status),
		BlockNumber: cpl.BlockNumber,
		CompletedAt: timestamppb.New(cpl.CompletedAt),
		Placeholder: cpl.Placeholder,
		RequestId:   cpl.RequestID,
		Recovered:   cpl.Recovered,
		Cursor:      cpl.Position.String(),
		Reason:      cpl.Reason,
	}
	if cpl.TxHash != nil {
		item.TxHash = cpl.TxHash.Hex()
	}
	if cpl.Fee != nil {
		item.Fee = cpl.Fee.String()
	}
	return item
}

func toAPITx(tx domain.ManagedTx) *v1.Tx {
	out := &v1.Tx{
		TxId:           tx.ID.String(),
		ChainId:        tx.ChainID,
		Signer:         tx.SignerText(),
		RequestId:      tx.RequestID,
		Nonce:          tx.Nonce,
		State:          string(tx.State),
		SubState:       string(tx.SubState),
		GasLimit:       tx.EffectiveGasLimit,
		SubmitAttempts: uint32(tx.SubmitAttempts),
		LastError:      tx.LastError,
		CreatedAt:      timestamppb.New(tx.CreatedAt),
		UpdatedAt:      timestamppb.New(tx.UpdatedAt),
	}
	out.To = tx.Intent.ToText()
	if tx.Intent.Value != nil {
		out.Value = tx.Intent.Value.String()
	}
	if len(tx.Intent.Data) > 0 {
		out.Data = hexutil.Encode(tx.Intent.Data)
	}
	if tx.TxHash != nil {
		out.TxHash = tx.TxHash.Hex()
	}
	if tx.Receipt != nil {
		out.Receipt = &v1.Receipt{
			TxHash:      tx.Receipt.TxHash.Hex(),
			Status:      tx.Receipt.Status,
			BlockNumber: tx.Receipt.BlockNumber,
			BlockHash:   tx.Receipt.BlockHash.Hex(),
			GasUsed:     tx.Receipt.GasUsed,
		}
		if price := tx.Receipt.EffectiveGasPrice; price != nil {
			out.Receipt.EffectiveGasPrice = price.String()
		}
		if l1 := tx.Receipt.L1Fee; l1 != nil {
			out.Receipt.L1Fee = l1.String()
		}
		if fee := tx.Receipt.Fee(); fee != nil {
			out.Receipt.Fee = fee.String()
		}
	}
	if tx.ConfirmedAt != nil {
		out.ConfirmedAt = timestamppb.New(*tx.ConfirmedAt)
	}
	out.Recovered = tx.RecoveredAt != nil
	return out
}
