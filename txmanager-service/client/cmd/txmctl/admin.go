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
		Short: "the signers the service holds keys for, with their condition (serving, recovering, quarantined, cannot sign), lease, nonces, pending, unsigned and stuck transactions",
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
			t := newTable(o.out, "CHAIN", "SIGNER", "CONDITION", "LEASE OWNER", "TOKEN", "LIVE", "NEXT NONCE", "PENDING", "OLDEST", "UNSIGNED", "STUCK")
			for _, s := range signers {
				t.row(fmt.Sprint(s.GetChainId()), s.GetSigner(), conditionText(s), orDash(s.GetLeaseOwner()), fmt.Sprint(s.GetFencingToken()), yesNo(s.GetLeaseLive()),
					fmt.Sprint(s.GetNextNonce()), fmt.Sprint(s.GetPendingDepth()), fmt.Sprintf("%.0fs", s.GetOldestPendingAgeSeconds()),
					fmt.Sprint(s.GetUnsigned()), fmt.Sprint(s.GetStuckCount()))
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
				"condition", conditionText(s), "quarantined", yesNo(s.GetQuarantined()), "recovering", recoveringText(s),
				"signing failing since", when(s.GetSigningFailingSince()), "signing error", s.GetSigningError(),
				"unsigned", fmt.Sprintf("%d (oldest %.0fs)", s.GetUnsigned(), s.GetOldestUnsignedAgeSeconds()))
		},
	}
	cmd.AddCommand(status, newSignerAddCommand(o), newSignerRetireCommand(o), newSignerPauseCommand(o, true), newSignerPauseCommand(o, false), newRosterCommand(o), newFundingCommand(o))
	return cmd
}

// conditionText is what holds a signer's creates back, in a word or two.
func conditionText(s *v1.SignerStatus) string {
	switch {
	case s.GetQuarantined() && s.GetRecovering():
		return "recovering"
	case s.GetQuarantined():
		return "QUARANTINED"
	case s.GetSigningFailingSince() != nil:
		return "CANNOT SIGN"
	}
	return "serving"
}

func recoveringText(s *v1.SignerStatus) string {
	if !s.GetRecovering() {
		return "no"
	}
	return fmt.Sprintf("yes, %d unknown nonces not recorded yet", s.GetUnrecordedNonces())
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
		"retired", when(s.GetRetiredAt()), "retired by", s.GetRetiredBy(), "unfinished", fmt.Sprint(s.GetUnfinished()), "note", s.GetNote(),
		"paused", when(s.GetPausedAt()), "paused by", s.GetPausedBy(), "pause note", s.GetPauseNote())
}

func newQuarantineCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "quarantine", Short: "signers held because the chain knows nonces the database does not: list, release"}
	var signer string
	var nonces bool
	list := &cobra.Command{
		Use:   "list [--signer <address>] [--nonces]",
		Short: "every quarantined signer (or one signer): its unknown nonces in ranges by what recovery made of them, or one by one (--nonces)",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := o.deadline(cmd.Context(), defaultCallTimeout)
			defer cancel()
			reports, err := o.quarantines(ctx, signer, nonces)
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
	list.Flags().BoolVar(&nonces, "nonces", false, "list every unknown nonce with what the chain holds there, not only the ranges")
	var note string
	release := &cobra.Command{
		Use:   "release <signer> --note <why>",
		Short: "release a quarantined signer once its unknown nonces are accounted for (it serves again, above them, once recovery has recorded what the chain holds there)",
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
// with its ranges and, with nonces, all its unknown nonces (the admin API pages them).
func (o *options) quarantines(ctx context.Context, signer string, nonces bool) ([]*v1.Quarantine, error) {
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
			page, err := o.client.Quarantine(ctx, &v1.GetQuarantineRequest{ChainId: t.chainID, Signer: t.signer, FromNonce: from, ListNonces: nonces})
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
		"recorded", recordedText(q), "release requested", releaseRequestedText(q), "released", releasedText(q)); err != nil {
		return err
	}
	if len(q.GetRanges()) > 0 {
		t := newTable(w, "  NONCES", "COUNT", "RECOVERY")
		for _, r := range q.GetRanges() {
			span := fmt.Sprint(r.GetFirstNonce())
			if r.GetLastNonce() != r.GetFirstNonce() {
				span += ".." + fmt.Sprint(r.GetLastNonce())
			}
			t.row("  "+span, fmt.Sprint(r.GetCount()), rangeClassText(r.GetClass()))
		}
		if err := t.flush(); err != nil {
			return err
		}
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

// rangeClassText says in words what recovery made of a range of unknown nonces.
func rangeClassText(class string) string {
	switch class {
	case "ADOPTED":
		return "adopted by retried requests"
	case "UNCLAIMED":
		return "recorded, adoptable"
	case "EXPIRED":
		return "recorded, adoption window over"
	case "NOT_RECORDED":
		return "not recorded (not reached yet, or not on chain)"
	}
	return class
}

func recordedText(q *v1.Quarantine) string {
	if q.GetChainNonce() == 0 {
		return ""
	}
	return fmt.Sprintf("%d transactions; every unknown nonce below %d has one", q.GetRecorded(), q.GetRecordedTo())
}

func releaseRequestedText(q *v1.Quarantine) string {
	if q.GetReleaseRequestedAt() == nil {
		return ""
	}
	return fmt.Sprintf("%s by %s", when(q.GetReleaseRequestedAt()), q.GetReleaseRequestedBy())
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
