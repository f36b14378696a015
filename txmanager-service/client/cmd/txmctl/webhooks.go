package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func newWebhooksCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhooks",
		Short: "webhook subscriptions: pushed, signed events (docs/webhooks.md)",
	}
	var req v1.CreateWebhookRequest
	var chains []uint
	create := &cobra.Command{
		Use:   "create --url <https://...> [--secret <s>] [--state CONFIRMED ...] [--signer <address> ...] [--chain <id> ...] [--from-start]",
		Short: "subscribe a receiver; prints the signing secret once",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, c := range chains {
				req.Chains = append(req.Chains, uint64(c))
			}
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			resp, err := o.client.CreateWebhook(ctx, &req)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, resp)
			}
			if err := o.webhook(resp.GetWebhook()); err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.out, "secret\t%s\t(shown this once: receivers verify signatures with it)\n", resp.GetSecret())
			return err
		},
	}
	create.Flags().StringVar(&req.Url, "url", "", "the receiver's URL")
	create.Flags().StringVar(&req.Secret, "secret", "", "the signing secret (16 to 256 characters; empty: generated)")
	create.Flags().StringSliceVar(&req.States, "state", nil, "only completions in these final states")
	create.Flags().StringSliceVar(&req.Signers, "signer", nil, "only these signers'")
	create.Flags().UintSliceVar(&chains, "chain", nil, "only these chains'")
	create.Flags().StringVar(&req.Description, "description", "", "what it is for")
	create.Flags().BoolVar(&req.FromStart, "from-start", false, "deliver the whole feed still kept (default: from now)")
	create.Flags().Int32Var(&req.BatchSize, "batch", 1, "the most events one delivery carries, 1 to 100 (above 1: every delivery is a batch)")
	_ = create.MarkFlagRequired("url")
	list := &cobra.Command{
		Use:   "list",
		Short: "every subscription with its cursor and delivery state",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			hooks, err := o.client.Webhooks(ctx)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, &v1.ListWebhooksResponse{Webhooks: hooks})
			}
			t := newTable(o.out, "ID", "STATE", "URL", "CURSOR", "DELIVERED", "NODE", "FAILING SINCE", "LAST ERROR")
			for _, h := range hooks {
				t.row(h.GetSubscriptionId(), h.GetState(), h.GetUrl(), strconv.FormatInt(h.GetCursor(), 10), strconv.FormatInt(h.GetDelivered(), 10),
					orDash(h.GetOwnerNode()), when(h.GetFailingSince()), orDash(h.GetLastError()))
			}
			return t.flush()
		},
	}
	one := func(use, short string, call func(cmd *cobra.Command, id string) (*v1.Webhook, error)) *cobra.Command {
		return &cobra.Command{
			Use:   use + " <subscription id>",
			Short: short,
			Args:  exactArgs(1, "a subscription id"),
			RunE: func(cmd *cobra.Command, args []string) error {
				h, err := call(cmd, args[0])
				if err != nil {
					return err
				}
				return o.webhook(h)
			},
		}
	}
	show := one("show", "one subscription", func(cmd *cobra.Command, id string) (*v1.Webhook, error) {
		ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
		defer cancel()
		return o.client.Webhook(ctx, id)
	})
	pause := one("pause", "stop deliveries until resumed", func(cmd *cobra.Command, id string) (*v1.Webhook, error) {
		ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
		defer cancel()
		return o.client.PauseWebhook(ctx, id)
	})
	resume := one("resume", "restart deliveries from the cursor (also a dead subscription)", func(cmd *cobra.Command, id string) (*v1.Webhook, error) {
		ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
		defer cancel()
		return o.client.ResumeWebhook(ctx, id)
	})
	var cursor int64
	replay := one("replay", "deliver again everything after --cursor (a feed position; 0: all still kept)", func(cmd *cobra.Command, id string) (*v1.Webhook, error) {
		ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
		defer cancel()
		return o.client.ReplayWebhook(ctx, id, cursor)
	})
	replay.Flags().Int64Var(&cursor, "cursor", 0, "the feed position to deliver after")
	del := &cobra.Command{
		Use:   "delete <subscription id>",
		Short: "remove a subscription",
		Args:  exactArgs(1, "a subscription id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			if err := o.client.DeleteWebhook(ctx, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(o.out, "deleted %s\n", args[0])
			return err
		},
	}
	cmd.AddCommand(create, list, show, pause, resume, replay, del)
	return cmd
}

func (o *options) webhook(h *v1.Webhook) error {
	if o.json {
		return writeJSON(o.out, h)
	}
	chains := make([]string, len(h.GetChains()))
	for i, c := range h.GetChains() {
		chains[i] = strconv.FormatUint(c, 10)
	}
	all := func(list []string) string {
		if len(list) == 0 {
			return "all"
		}
		return strings.Join(list, ", ")
	}
	return fields(o.out, "subscription", h.GetSubscriptionId(), "state", h.GetState(), "url", h.GetUrl(), "chains", all(chains), "signers", all(h.GetSigners()),
		"states", all(h.GetStates()), "events a delivery", strconv.Itoa(int(max(h.GetBatchSize(), 1))), "cursor", strconv.FormatInt(h.GetCursor(), 10), "delivered", strconv.FormatInt(h.GetDelivered(), 10),
		"node", orDash(h.GetOwnerNode()), "last success", when(h.GetLastSuccessAt()), "failing since", when(h.GetFailingSince()),
		"last error", orDash(h.GetLastError()), "created", when(h.GetCreatedAt())+" by "+h.GetCreatedBy(), "description", orDash(h.GetDescription()))
}
