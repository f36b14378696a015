package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

func newApprovalsCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "intents spending policies sent for approval: list, show, approve, reject (docs/policies.md#approvals)",
	}
	var q txmclient.ApprovalsQuery
	list := &cobra.Command{
		Use:   "list [--state AWAITING_APPROVAL] [--signer <address>] [--before <id>] [--limit <n>]",
		Short: "approvals of the signers this credential may use, newest first",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			approvals, next, err := o.client.ListApprovals(ctx, q)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, &v1.ListApprovalsResponse{Approvals: approvals, Next: next})
			}
			t := newTable(o.out, "ID", "STATE", "SIGNER", "REQUEST", "TO", "VALUE", "APPROVALS", "ROLE", "EXPIRES", "REQUESTER")
			for _, a := range approvals {
				t.row(a.GetApprovalId(), a.GetState(), a.GetSigner(), orDash(a.GetRequestId()), orDash(a.GetTo()), a.GetValue(),
					fmt.Sprintf("%d/%d", a.GetApprovals(), a.GetRequired()), a.GetRole(), when(a.GetExpiresAt()), a.GetRequester())
			}
			if err := t.flush(); err != nil {
				return err
			}
			if next != "" {
				_, err = fmt.Fprintf(o.out, "next page: --before %s\n", next)
			}
			return err
		},
	}
	list.Flags().StringVar(&q.State, "state", "", "AWAITING_APPROVAL, APPROVED, ADMITTED, EXPIRED, REJECTED or REFUSED")
	list.Flags().StringVar(&q.Signer, "signer", "", "only this signer's")
	list.Flags().StringVar(&q.Before, "before", "", "the previous page's next")
	list.Flags().Uint32Var(&q.Limit, "limit", 0, "page size, 1..500")
	show := &cobra.Command{
		Use:   "show <approval id>",
		Short: "one approval with its votes",
		Args:  exactArgs(1, "an approval id (the create's txId)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			a, err := o.client.Approval(ctx, args[0])
			if err != nil {
				return err
			}
			return o.approval(a)
		},
	}
	cmd.AddCommand(list, show, newDecideCommand(o, true), newDecideCommand(o, false))
	return cmd
}

func newDecideCommand(o *options, approve bool) *cobra.Command {
	var note string
	use, short := "reject <approval id> --note <why>", "end the approval at once: REJECTED, final, in the feed"
	if approve {
		use, short = "approve <approval id> [--note <why>]", "approve an intent (once per credential; never your own request)"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "an approval id (the create's txId)"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			call := o.client.Reject
			if approve {
				call = o.client.Approve
			}
			a, err := call(ctx, args[0], note)
			if err != nil {
				return err
			}
			return o.approval(a)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why (kept with the vote and in the audit trail)")
	if !approve {
		_ = cmd.MarkFlagRequired("note")
	}
	return cmd
}

func (o *options) approval(a *v1.Approval) error {
	if o.json {
		return writeJSON(o.out, a)
	}
	err := fields(o.out, "approval", a.GetApprovalId(), "state", a.GetState(), "signer", a.GetSigner(), "request id", orDash(a.GetRequestId()),
		"requester", a.GetRequester(), "to", orDash(a.GetTo()), "value", a.GetValue(), "approvals", fmt.Sprintf("%d of %d (role %s)", a.GetApprovals(), a.GetRequired(), a.GetRole()),
		"why", a.GetReason(), "policy", fmt.Sprintf("%s, version %d", a.GetPolicyScope(), a.GetPolicyVersion()), "created", when(a.GetCreatedAt()),
		"expires", when(a.GetExpiresAt()), "final reason", orDash(a.GetFinalReason()))
	if err != nil || len(a.GetVotes()) == 0 {
		return err
	}
	t := newTable(o.out, "APPROVER", "DECISION", "AT", "NODE", "NOTE")
	for _, v := range a.GetVotes() {
		decision := "reject"
		if v.GetApprove() {
			decision = "approve"
		}
		t.row(v.GetApprover(), decision, when(v.GetAt()), v.GetNodeId(), orDash(v.GetNote()))
	}
	return t.flush()
}
