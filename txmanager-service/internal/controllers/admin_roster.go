package controllers

import (
	"context"

	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AddSigner implements v1.AdminServiceServer. The roster is the cluster's, so any node
// answers: no routing to a lease owner.
func (c *AdminController) AddSigner(ctx context.Context, req *v1.AddSignerRequest) (*v1.RosterSigner, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	entry, err := c.roster.AddSigner(ctx, req.GetSigner(), req.GetSource(), req.GetKeyRef(), req.GetNote(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIRosterSigner(entry), nil
}

// RetireSigner implements v1.AdminServiceServer.
func (c *AdminController) RetireSigner(ctx context.Context, req *v1.RetireSignerRequest) (*v1.RosterSigner, error) {
	if err := requireAdminFor(ctx, req.GetSigner()); err != nil {
		return nil, err
	}
	entry, err := c.roster.RetireSigner(ctx, req.GetSigner(), req.GetNote(), callerID(ctx))
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	return toAPIRosterSigner(entry), nil
}

// ListRoster implements v1.AdminServiceServer.
func (c *AdminController) ListRoster(ctx context.Context, _ *v1.ListRosterRequest) (*v1.ListRosterResponse, error) {
	if err := requireAdmin(ctx); err != nil {
		return nil, err
	}
	entries, err := c.roster.List(ctx)
	if err != nil {
		return nil, ToAPIError(c.log, err)
	}
	out := &v1.ListRosterResponse{Signers: make([]*v1.RosterSigner, 0, len(entries))}
	for _, e := range entries {
		if granted(ctx, e.Signer.Hex()) {
			out.Signers = append(out.Signers, toAPIRosterSigner(e))
		}
	}
	return out, nil
}

// callerID names the authenticated caller for the roster's record.
func callerID(ctx context.Context) string {
	p, _ := domain.PrincipalFrom(ctx)
	return p.ID
}

func toAPIRosterSigner(e services.RosterEntry) *v1.RosterSigner {
	out := &v1.RosterSigner{
		Signer: e.Signer.Hex(), Source: string(e.Source), KeyRef: e.KeyRef, State: string(e.State),
		AddedAt: timestamppb.New(e.AddedAt), AddedBy: e.AddedBy, RetiredBy: e.RetiredBy, Note: e.Note,
		Unfinished: uint64(max(e.Unfinished, 0)),
	}
	if e.RetiringAt != nil {
		out.RetiringAt = timestamppb.New(*e.RetiringAt)
	}
	if e.RetiredAt != nil {
		out.RetiredAt = timestamppb.New(*e.RetiredAt)
	}
	if e.PausedAt != nil {
		out.PausedAt, out.PausedBy, out.PauseNote = timestamppb.New(*e.PausedAt), e.PausedBy, e.PauseNote
	}
	return out
}
