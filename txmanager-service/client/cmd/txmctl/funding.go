package main

import (
	"fmt"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func newFundingCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "funding",
		Short: "watch a signer's balance with low- and high-water marks, refilled from a treasury (docs/webhooks.md#funding)",
	}
	var req v1.SetFundingRequest
	set := &cobra.Command{
		Use:   "set <signer> --low-water <wei> --high-water <wei> [--treasury <signer>]",
		Short: "watch the signer's balance; with a treasury, refill it when low",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Signer, req.ChainId = args[0], o.chainID
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			f, err := o.client.SetFunding(ctx, &req)
			if err != nil {
				return err
			}
			return o.funding(f)
		},
	}
	set.Flags().StringVar(&req.LowWater, "low-water", "", "under this (wei) the signer is low")
	set.Flags().StringVar(&req.HighWater, "high-water", "", "at this (wei) it has recovered; a refill brings it here")
	set.Flags().StringVar(&req.Treasury, "treasury", "", "the signer that refills it (empty: events only)")
	_ = set.MarkFlagRequired("low-water")
	_ = set.MarkFlagRequired("high-water")
	get := &cobra.Command{
		Use:   "get <signer>",
		Short: "the signer's marks and where its balance stands",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			f, err := o.client.Funding(ctx, o.chainID, args[0])
			if err != nil {
				return err
			}
			return o.funding(f)
		},
	}
	del := &cobra.Command{
		Use:   "delete <signer>",
		Short: "stop watching the signer's balance",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			if err := o.client.DeleteFunding(ctx, o.chainID, args[0]); err != nil {
				return err
			}
			_, err := fmt.Fprintf(o.out, "no longer watching %s\n", args[0])
			return err
		},
	}
	cmd.AddCommand(set, get, del)
	return cmd
}

func (o *options) funding(f *v1.SignerFunding) error {
	if o.json {
		return writeJSON(o.out, f)
	}
	return fields(o.out, "signer", f.GetSigner(), "chain", fmt.Sprint(f.GetChainId()), "low water", f.GetLowWater(), "high water", f.GetHighWater(),
		"treasury", orDash(f.GetTreasury()), "low", fmt.Sprint(f.GetLow()), "last balance", orDash(f.GetLastBalance()),
		"refills", fmt.Sprint(f.GetRefills()), "last refill", orDash(f.GetRefillTxId()), "updated", when(f.GetUpdatedAt())+" by "+f.GetUpdatedBy())
}
