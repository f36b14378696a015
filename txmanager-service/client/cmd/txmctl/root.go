package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/spf13/cobra"

	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// options are the flags every command shares.
type options struct {
	addr   string
	apiKey string
	token  string
	useTLS bool
	// plaintext: the API key or token may travel without TLS to another machine.
	plaintext bool
	caFile    string
	chainID   uint64
	json      bool
	timeout   time.Duration
	out       io.Writer
	client    *txmclient.Client
	closeAll  func()
}

func newRootCommand(stdout io.Writer) *cobra.Command {
	o := &options{out: stdout}
	root := &cobra.Command{
		Use:   "txmctl",
		Short: "txmctl talks to txmanager-service: transactions, the completions feed, signers, quarantines, stuck transactions, nodes",
		Long: `txmctl talks to txmanager-service over gRPC with its Go client.

Tables for people; --json for scripts. Operators' commands (signers, quarantine, stuck,
nodes) need an API key or token with the admin grant.

Exit codes:
  0  done (tx wait: CONFIRMED)
  1  failed: an unexpected error
  2  usage: a wrong command line
  3  not found: no such transaction, or nothing to release
  4  refused: the service refused the request as it stands (invalid argument, conflict,
     unknown signer, quarantined signer, expired cursor)
  5  not allowed: credentials missing or not granted
  6  unavailable: the service could not be reached or could not serve; try again
  7  timed out: --timeout passed first (tx wait: the transaction is not final yet)
  8  tx wait: the transaction ended FAILED_FINAL
  9  audit verify: a record of the audit trail was edited or removed
  130 interrupted (Ctrl-C or SIGTERM)`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return o.connect(cmd.Context())
		},
		PersistentPostRun: func(*cobra.Command, []string) {
			if o.closeAll != nil {
				o.closeAll()
			}
		},
	}
	flags := root.PersistentFlags()
	flags.StringVarP(&o.addr, "addr", "a", envOr("TXMCTL_ADDR", "127.0.0.1:9090"), "the service's gRPC address(es), comma-separated (env TXMCTL_ADDR)")
	// The credentials' environment variables are read in connect, not made the flags'
	// defaults: cobra prints a default in every help and usage text.
	flags.StringVar(&o.apiKey, "api-key", "", "API key (env TXMCTL_API_KEY)")
	flags.StringVar(&o.token, "token", "", "JWT bearer token, instead of an API key (env TXMCTL_TOKEN)")
	flags.BoolVar(&o.useTLS, "tls", false, "connect with TLS, trusting the system's CAs")
	flags.BoolVar(&o.plaintext, "plaintext", os.Getenv("TXMCTL_PLAINTEXT") == "1",
		"send the API key or token without TLS to another machine, where something else encrypts the connection (a mesh; env TXMCTL_PLAINTEXT=1)")
	flags.StringVar(&o.caFile, "ca-file", os.Getenv("TXMCTL_CA_FILE"), "connect with TLS, trusting this CA (PEM; env TXMCTL_CA_FILE)")
	flags.Uint64Var(&o.chainID, "chain", 0, "chain id (needed when the service serves several chains)")
	flags.BoolVar(&o.json, "json", false, "print JSON (the API's messages) instead of tables")
	flags.DurationVar(&o.timeout, "timeout", 0, "give up after this long (default: 30s for a call; tx wait and feed tail until done)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &usageError{err.Error()} })
	root.AddCommand(newTxCommand(o), newFeedCommand(o), newSignersCommand(o), newQuarantineCommand(o), newStuckCommand(o), newNodesCommand(o),
		newPolicyCommand(o), newAuditCommand(o), newApprovalsCommand(o), newWebhooksCommand(o))
	return root
}

// connect builds the client from the flags.
func (o *options) connect(ctx context.Context) error {
	if o.apiKey == "" {
		o.apiKey = os.Getenv("TXMCTL_API_KEY")
	}
	if o.token == "" {
		o.token = os.Getenv("TXMCTL_TOKEN")
	}
	cfg := txmclient.Config{APIKey: o.apiKey, MaxAttempts: 4, PlaintextCredentials: o.plaintext}
	for _, a := range strings.Split(o.addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Endpoints = append(cfg.Endpoints, a)
		}
	}
	if len(cfg.Endpoints) == 0 {
		return &usageError{"--addr: no address"}
	}
	if o.token != "" {
		token := o.token
		cfg.APIKey, cfg.BearerToken = "", func(context.Context) (string, error) { return token, nil }
	}
	if o.useTLS || o.caFile != "" {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		if o.caFile != "" {
			pem, err := os.ReadFile(o.caFile)
			if err != nil {
				return &usageError{fmt.Sprintf("--ca-file: %v", err)}
			}
			cfg.TLS.RootCAs = x509.NewCertPool()
			if !cfg.TLS.RootCAs.AppendCertsFromPEM(pem) {
				return &usageError{fmt.Sprintf("--ca-file %s: no PEM certificate", o.caFile)}
			}
		}
	}
	client, closeAll, err := txmclient.New(ctx, cfg)
	if errors.Is(err, txmclient.ErrPlaintextCredentials) {
		return &usageError{err.Error() + " (txmctl: --tls or --ca-file, or --plaintext)"}
	}
	if err != nil {
		return err
	}
	o.client, o.closeAll = client, closeAll
	return nil
}

// defaultCallTimeout bounds a command that makes calls and waits for nothing.
const defaultCallTimeout = 30 * time.Second

// deadline bounds a command by --timeout, or by def when it is not set (0: no bound).
func (o *options) deadline(ctx context.Context, def time.Duration) (context.Context, context.CancelFunc) {
	switch {
	case o.timeout > 0:
		return context.WithTimeout(ctx, o.timeout)
	case def > 0:
		return context.WithTimeout(ctx, def)
	}
	return context.WithCancel(ctx)
}

// exactArgs is cobra.ExactArgs with a usage exit code.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{fmt.Sprintf("want %s, got %d argument(s)", names, len(args))}
		}
		return nil
	}
}

func isCobraUsage(err error) bool {
	return strings.HasPrefix(err.Error(), "unknown command") || strings.HasPrefix(err.Error(), "required flag")
}

func reasonOf(err error) string { return kerrors.FromError(err).Reason }

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
