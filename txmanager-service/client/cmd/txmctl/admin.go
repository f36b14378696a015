package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func newSignersCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "signers",
		Short: "the signers the service holds keys for, with their lease, nonces, pending and stuck transactions, quarantine",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			signers, err := o.client.Signers(ctx, o.chainID)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, signers)
			}
			t := newTable(o.out, "CHAIN", "SIGNER", "LEASE OWNER", "TOKEN", "LIVE", "NEXT NONCE", "PENDING", "OLDEST", "STUCK", "QUARANTINED")
			for _, s := range signers {
				t.row(fmt.Sprint(s.GetChainId()), s.GetSigner(), orDash(s.GetLeaseOwner()), fmt.Sprint(s.GetFencingToken()), yesNo(s.GetLeaseLive()),
					fmt.Sprint(s.GetNextNonce()), fmt.Sprint(s.GetPendingDepth()), fmt.Sprintf("%.0fs", s.GetOldestPendingAgeSeconds()),
					fmt.Sprint(s.GetStuckCount()), yesNo(s.GetQuarantined()))
			}
			return t.flush()
		},
	}
	status := &cobra.Command{
		Use:   "status <signer>",
		Short: "one signer's status",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			s, err := o.client.SignerStatus(ctx, o.chainID, args[0])
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, s)
			}
			return fields(o.out,
				"signer", s.GetSigner(), "chain", fmt.Sprint(s.GetChainId()),
				"lease owner", s.GetLeaseOwner(), "fencing token", fmt.Sprint(s.GetFencingToken()),
				"lease live", yesNo(s.GetLeaseLive()), "lease expires", when(s.GetLeaseExpiresAt()),
				"next nonce", fmt.Sprint(s.GetNextNonce()), "pending", fmt.Sprint(s.GetPendingDepth()),
				"oldest pending", fmt.Sprintf("%.0fs", s.GetOldestPendingAgeSeconds()), "stuck", fmt.Sprint(s.GetStuckCount()),
				"quarantined", yesNo(s.GetQuarantined()))
		},
	}
	cmd.AddCommand(status, newSignerAddCommand(o), newSignerRetireCommand(o), newRosterCommand(o))
	return cmd
}

func newSignerAddCommand(o *options) *cobra.Command {
	var source, keyRef, note string
	cmd := &cobra.Command{
		Use:   "add <signer> --source keystore|awsKms|gcpKms|external [--key-ref <kms key id>] [--note <why>]",
		Short: "put a signer into service on every node without a restart (its key found through the nodes' signers configuration)",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			s, err := o.client.AddSigner(ctx, &v1.AddSignerRequest{Signer: args[0], Source: source, KeyRef: keyRef, Note: note})
			if err != nil {
				return err
			}
			return o.rosterSigner(s)
		},
	}
	cmd.Flags().StringVar(&source, "source", "", "where the key is: keystore (signers.keystore.dir), awsKms, gcpKms, external (clef)")
	cmd.Flags().StringVar(&keyRef, "key-ref", "", "the KMS key id (awsKms: key id, ARN or alias; gcpKms: the crypto key version's name)")
	cmd.Flags().StringVar(&note, "note", "", "why (recorded)")
	_ = cmd.MarkFlagRequired("source")
	return cmd
}

func newSignerRetireCommand(o *options) *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "retire <signer> --note <why>",
		Short: "retire a signer: no new transaction from now on; its unfinished ones go on to a final state, then its leases go",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			s, err := o.client.RetireSigner(ctx, args[0], note)
			if err != nil {
				return err
			}
			return o.rosterSigner(s)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "why (recorded)")
	_ = cmd.MarkFlagRequired("note")
	return cmd
}

func newRosterCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "roster",
		Short: "the signer roster: every signer added at run time or configured in a node's file, and its state",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			roster, err := o.client.Roster(ctx)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, roster)
			}
			t := newTable(o.out, "SIGNER", "STATE", "SOURCE", "KEY", "ADDED", "RETIRING SINCE", "RETIRED", "UNFINISHED")
			for _, s := range roster {
				t.row(s.GetSigner(), s.GetState(), s.GetSource(), orDash(s.GetKeyRef()), when(s.GetAddedAt()), when(s.GetRetiringAt()),
					when(s.GetRetiredAt()), fmt.Sprint(s.GetUnfinished()))
			}
			return t.flush()
		},
	}
}

// rosterSigner prints one roster signer.
func (o *options) rosterSigner(s *v1.RosterSigner) error {
	if o.json {
		return writeJSON(o.out, s)
	}
	return fields(o.out,
		"signer", s.GetSigner(), "state", s.GetState(), "source", s.GetSource(), "key", s.GetKeyRef(),
		"added", when(s.GetAddedAt()), "added by", s.GetAddedBy(), "retiring since", when(s.GetRetiringAt()),
		"retired", when(s.GetRetiredAt()), "retired by", s.GetRetiredBy(), "unfinished", fmt.Sprint(s.GetUnfinished()), "note", s.GetNote())
}

func newQuarantineCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "quarantine", Short: "signers held because the chain knows nonces the database does not: list, release"}
	var signer string
	list := &cobra.Command{
		Use:   "list [--signer <address>]",
		Short: "every quarantined signer (or one signer) with what the chain holds at each unknown nonce",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			reports, err := o.quarantines(ctx, signer)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, reports)
			}
			if len(reports) == 0 {
				_, err := fmt.Fprintln(o.out, "no signer is quarantined")
				return err
			}
			for i, q := range reports {
				if i > 0 {
					fmt.Fprintln(o.out)
				}
				if err := quarantineReport(o.out, q); err != nil {
					return err
				}
			}
			return nil
		},
	}
	list.Flags().StringVar(&signer, "signer", "", "one signer only, quarantined or not")
	var note string
	release := &cobra.Command{
		Use:   "release <signer> --note <why>",
		Short: "release a quarantined signer once its unknown nonces are accounted for (allocation goes on above them)",
		Args:  exactArgs(1, "a signer address"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			q, err := o.client.ReleaseSigner(ctx, o.chainID, args[0], note)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, q)
			}
			return quarantineReport(o.out, q)
		},
	}
	release.Flags().StringVar(&note, "note", "", "why it is safe to release (recorded)")
	_ = release.MarkFlagRequired("note")
	cmd.AddCommand(list, release)
	return cmd
}

// quarantines are the reports to list: one signer's, or every quarantined signer's, each
// with all its unknown nonces (the admin API pages them).
func (o *options) quarantines(ctx context.Context, signer string) ([]*v1.Quarantine, error) {
	type target struct {
		chainID uint64
		signer  string
	}
	var targets []target
	if signer != "" {
		targets = append(targets, target{o.chainID, signer})
	} else {
		signers, err := o.client.Signers(ctx, o.chainID)
		if err != nil {
			return nil, err
		}
		for _, s := range signers {
			if s.GetQuarantined() {
				targets = append(targets, target{s.GetChainId(), s.GetSigner()})
			}
		}
	}
	reports := make([]*v1.Quarantine, 0, len(targets))
	for _, t := range targets {
		var report *v1.Quarantine
		for from := uint64(0); ; {
			page, err := o.client.Quarantine(ctx, &v1.GetQuarantineRequest{ChainId: t.chainID, Signer: t.signer, FromNonce: from})
			if err != nil {
				return nil, err
			}
			if report == nil {
				report = page
			} else {
				report.UnknownNonces = append(report.UnknownNonces, page.GetUnknownNonces()...)
			}
			if from = page.GetNextFromNonce(); from == 0 {
				break
			}
		}
		report.NextFromNonce = 0
		reports = append(reports, report)
	}
	return reports, nil
}

func quarantineReport(w io.Writer, q *v1.Quarantine) error {
	state := "not quarantined"
	if q.GetQuarantined() {
		state = fmt.Sprintf("QUARANTINED since %s (detected by %s)", when(q.GetDetectedAt()), orDash(q.GetDetectedBy()))
	}
	if err := fields(w,
		"signer", q.GetSigner(), "chain", fmt.Sprint(q.GetChainId()), "state", state,
		"database next nonce", fmt.Sprint(q.GetDbNextNonce()), "chain nonce", fmt.Sprint(q.GetChainNonce()),
		"released", releasedText(q)); err != nil {
		return err
	}
	if len(q.GetUnknownNonces()) == 0 {
		return nil
	}
	t := newTable(w, "  NONCE", "ON CHAIN", "TX HASH", "BLOCK", "TO", "VALUE", "GAS", "DATA DIGEST", "RECOVERY")
	for _, u := range q.GetUnknownNonces() {
		onChain, block, gas := "not seen", "-", "-"
		if u.GetFound() {
			onChain, block, gas = "yes", fmt.Sprint(u.GetBlockNumber()), fmt.Sprint(u.GetGasLimit())
			if u.GetBlockNumber() == 0 {
				onChain, block = "pending", "-"
			}
		}
		t.row("  "+fmt.Sprint(u.GetNonce()), onChain, orDash(u.GetTxHash()), block, orDash(u.GetTo()), orDash(u.GetValue()), gas,
			orDash(u.GetDataDigest()), recoveryText(u))
	}
	return t.flush()
}

// recoveryText says what recovery made of an unknown nonce: adopted by a request, adoptable
// until a time, or not recorded.
func recoveryText(u *v1.UnknownNonce) string {
	switch {
	case u.GetAdopted():
		return "adopted by " + u.GetAdoptedByRequestId()
	case u.GetRecoveredTxId() != "" && u.GetUnclaimedUntil() != nil:
		return "unclaimed until " + when(u.GetUnclaimedUntil())
	case u.GetRecoveredTxId() != "":
		return "recorded, unclaimed"
	default:
		return "-"
	}
}

func releasedText(q *v1.Quarantine) string {
	if q.GetReleasedAt() == nil {
		return ""
	}
	return fmt.Sprintf("%s by %s: %s", when(q.GetReleasedAt()), q.GetReleasedBy(), q.GetReleaseNote())
}

func newStuckCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "stuck", Short: "STUCK transactions: list, resolve"}
	var signer string
	var limit uint32
	list := &cobra.Command{
		Use:   "list [--signer <address>] [--limit N]",
		Short: "STUCK transactions, oldest first",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			txs, err := o.client.ListStuck(ctx, &v1.ListStuckRequest{ChainId: o.chainID, Signer: signer, Limit: limit})
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, txs)
			}
			t := newTable(o.out, "TX ID", "CHAIN", "SIGNER", "NONCE", "STATE", "ATTEMPTS", "TX HASH", "CREATED", "LAST ERROR")
			for _, tx := range txs {
				t.row(tx.GetTxId(), fmt.Sprint(tx.GetChainId()), tx.GetSigner(), fmt.Sprint(tx.GetNonce()), joinState(tx.GetState(), tx.GetSubState()),
					fmt.Sprint(tx.GetSubmitAttempts()), orDash(tx.GetTxHash()), when(tx.GetCreatedAt()), orDash(tx.GetLastError()))
			}
			return t.flush()
		},
	}
	list.Flags().StringVar(&signer, "signer", "", "one signer only")
	list.Flags().Uint32Var(&limit, "limit", 0, "at most this many, 1..1000 (default 100)")
	var action, reason string
	resolve := &cobra.Command{
		Use:   "resolve <txId> --reason <why> [--action NOOP|CANCEL|REPLACE|PLACEHOLDER]",
		Short: "resolve an unmined transaction now (no action: the service's stuck hook decides)",
		Args:  exactArgs(1, "a transaction id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			resp, err := o.client.ResolveTx(ctx, args[0], action, reason)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSON(o.out, resp)
			}
			if _, err := fmt.Fprintf(o.out, "resolved with %s\n", resp.GetAction()); err != nil {
				return err
			}
			return txFields(o.out, resp.GetTx())
		},
	}
	resolve.Flags().StringVar(&action, "action", "", "NOOP (mark STUCK), CANCEL, REPLACE or PLACEHOLDER")
	resolve.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit trail)")
	_ = resolve.MarkFlagRequired("reason")
	cmd.AddCommand(list, resolve)
	return cmd
}

func newNodesCommand(o *options) *cobra.Command {
	return &cobra.Command{
		Use:   "nodes",
		Short: "the service's instances: addresses, version, liveness, leases held",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			nodes, err := o.client.Nodes(ctx)
			if err != nil {
				return err
			}
			if o.json {
				return writeJSONList(o.out, nodes)
			}
			t := newTable(o.out, "NODE", "INCARNATION", "GRPC", "HTTP", "VERSION", "ALIVE", "LEASES", "STARTED", "HEARTBEAT")
			for _, n := range nodes {
				t.row(n.GetNodeId(), n.GetIncarnation(), n.GetGrpcAddr(), n.GetHttpAddr(), n.GetVersion(), yesNo(n.GetAlive()),
					fmt.Sprint(n.GetLeases()), when(n.GetStartedAt()), when(n.GetHeartbeatAt()))
			}
			return t.flush()
		},
	}
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
