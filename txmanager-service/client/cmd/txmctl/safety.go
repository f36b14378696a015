package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func newSignerPauseCommand(o *options, pause bool) *cobra.Command {
	var note string
	use, short := "resume <signer> --note <why>", "let a paused signer take new transactions again"
	if pause {
		use, short = "pause <signer> --note <why>", "pause a signer on every node: no new transaction until resumed; those in flight go on to a final state"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			call := o.client.ResumeSigner
			if pause {
				call = o.client.PauseSigner
			}
			s, err := call(ctx, args[0], note)
			if err != nil {
				return err
			}
			return o.rosterSigner(s)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why (recorded in the audit trail)")
	_ = cmd.MarkFlagRequired("note")
	return cmd
}

func newPolicyCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "policy",
		Short: "spending policies of signers and credentials (docs/policies.md)",
	}
	var file string
	set := &cobra.Command{
		Use:   "set signer|credential <address or credential id> --file <policy.json | ->",
		Short: "make a JSON document the scope's spending policy, as its next version",
		Args:  exactArgs(2, "a scope kind (signer or credential) and the scope"),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := readPolicyFile(file, cmd.InOrStdin())
			if err != nil {
				return &usageError{err.Error()}
			}
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			p, err := o.client.SetPolicy(ctx, args[0], args[1], doc)
			if err != nil {
				return err
			}
			return o.policy(p)
		},
	}
	set.Flags().StringVarP(&file, "file", "f", "", "the policy document (- for standard input)")
	_ = set.MarkFlagRequired("file")
	get := &cobra.Command{
		Use:   "get signer|credential <scope>",
		Short: "the scope's policy in force",
		Args:  exactArgs(2, "a scope kind (signer or credential) and the scope"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			p, err := o.client.Policy(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return o.policy(p)
		},
	}
	del := &cobra.Command{
		Use:   "delete signer|credential <scope>",
		Short: "remove the scope's policy (its history keeps the deletion)",
		Args:  exactArgs(2, "a scope kind (signer or credential) and the scope"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			version, err := o.client.DeletePolicy(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(o.out, "policy of %s %s deleted (version %d)\n", args[0], args[1], version)
			return err
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "every policy in force",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			policies, err := o.client.Policies(ctx)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, policies)
			}
			t := newTable(o.out, "KIND", "SCOPE", "VERSION", "UPDATED", "BY", "POLICY")
			for _, p := range policies {
				doc, _ := p.GetPolicy().MarshalJSON()
				t.row(p.GetScopeKind(), p.GetScope(), fmt.Sprint(p.GetVersion()), when(p.GetUpdatedAt()), p.GetUpdatedBy(), string(doc))
			}
			return t.flush()
		},
	}
	versions := &cobra.Command{
		Use:   "versions signer|credential <scope>",
		Short: "the scope's policy versions, newest first",
		Args:  exactArgs(2, "a scope kind (signer or credential) and the scope"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			list, err := o.client.PolicyVersions(ctx, args[0], args[1])
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, list)
			}
			t := newTable(o.out, "VERSION", "CHANGED", "BY", "POLICY")
			for _, v := range list {
				doc := "(deleted)"
				if !v.GetDeleted() {
					raw, _ := v.GetPolicy().MarshalJSON()
					doc = string(raw)
				}
				t.row(fmt.Sprint(v.GetVersion()), when(v.GetChangedAt()), v.GetChangedBy(), doc)
			}
			return t.flush()
		},
	}
	cmd.AddCommand(set, get, del, list, versions)
	return cmd
}

func readPolicyFile(name string, stdin io.Reader) ([]byte, error) {
	if name == "-" {
		return io.ReadAll(io.LimitReader(stdin, 1<<20))
	}
	doc, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("read the policy: %w", err)
	}
	return doc, nil
}

func (o *options) policy(p *v1.Policy) error {
	if o.json {
		return writeJSON(o.out, p)
	}
	doc, _ := p.GetPolicy().MarshalJSON()
	return fields(o.out, "scope", p.GetScopeKind()+" "+p.GetScope(), "version", fmt.Sprint(p.GetVersion()), "updated", when(p.GetUpdatedAt()),
		"updated by", p.GetUpdatedBy(), "policy", string(doc))
}

func newAuditCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "audit",
		Short: "the audit trail of admin actions, policy changes and approvals",
	}
	var req v1.ListAuditRequest
	var since string
	list := &cobra.Command{
		Use:   "list [--subject <s>] [--action <a>] [--actor <credential>] [--since <RFC 3339>] [--after <seq>] [--limit <n>]",
		Short: "records in order, with filters",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if since != "" {
				at, err := time.Parse(time.RFC3339Nano, since)
				if err != nil {
					return &usageError{"--since: an RFC 3339 time such as 2026-11-29T00:00:00Z"}
				}
				req.Since = timestamppb.New(at)
			}
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			page, err := o.client.Audit(ctx, &req)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, page)
			}
			t := newTable(o.out, "SEQ", "AT", "NODE", "ACTOR", "ACTION", "SUBJECT", "BEFORE", "AFTER")
			for _, r := range page.GetRecords() {
				t.row(fmt.Sprint(r.GetSeq()), when(r.GetAt()), r.GetNodeId(), r.GetActor(), r.GetAction(), r.GetSubject(), orDash(r.GetBefore()), orDash(r.GetAfter()))
			}
			if err := t.flush(); err != nil {
				return err
			}
			if next := page.GetNextAfterSeq(); next != 0 {
				_, err = fmt.Fprintf(o.out, "more: --after %d\n", next)
			}
			return err
		},
	}
	list.Flags().StringVar(&req.Subject, "subject", "", `only this subject (e.g. "signer 0x..." or "policy credential payouts")`)
	list.Flags().StringVar(&req.Action, "action", "", "only this action (e.g. signer.pause, policy.set)")
	list.Flags().StringVar(&req.Actor, "actor", "", "only this credential's actions")
	list.Flags().StringVar(&since, "since", "", "only records from this time on")
	list.Flags().Int64Var(&req.AfterSeq, "after", 0, "records after this sequence number")
	list.Flags().Uint32Var(&req.Limit, "limit", 100, "at most this many (up to 1000)")
	verify := &cobra.Command{
		Use:   "verify",
		Short: "recompute the trail's hash chain; names the first record edited or removed (exit 9)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			v, err := o.client.VerifyAudit(ctx)
			if err != nil {
				return err
			}
			if o.json {
				err = writeJSON(o.out, v)
			} else if v.GetOk() {
				_, err = fmt.Fprintf(o.out, "audit trail intact: %d records checked, last record %d, head hash %s (keep it to compare later)\n",
					v.GetChecked(), v.GetLastSeq(), v.GetLastHash())
			} else {
				_, err = fmt.Fprintf(o.out, "audit trail BROKEN at record %d: %s (%d records before it hold)\n", v.GetFirstBadSeq(), v.GetReason(), v.GetChecked())
			}
			if err != nil {
				return err
			}
			if !v.GetOk() {
				return &quietError{code: exitAuditBroken}
			}
			return nil
		},
	}
	cmd.AddCommand(list, verify)
	return cmd
}
