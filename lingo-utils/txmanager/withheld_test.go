package txmanager_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/txmanager"
)

// Values a statement carried stay out of logs and spans: pgx's error for an argument it
// cannot encode prints the argument, and PostgreSQL's data exceptions quote the input they
// refused. The caller still gets the error as it was; what is logged and traced keeps its
// kind and position.
func TestValuesStayOutOfLogsAndSpans(t *testing.T) {
	t.Parallel()
	type card struct{ Number string }
	cases := []struct {
		name   string
		secret string
		run    func(ctx context.Context, s txmanager.Session, secret string) error
		// kept is what the logs and the span still say.
		kept string
	}{
		{
			name:   "an argument pgx cannot encode",
			secret: "4111-1111-1111-1111",
			run: func(ctx context.Context, s txmanager.Session, secret string) error {
				_, err := s.DB().Exec(ctx, "INSERT INTO account VALUES ($1, $2)", 3, card{Number: secret})
				return err
			},
			kept: "failed to encode args[1]: the value withheld",
		},
		{
			name:   "an argument pgx cannot encode, simple protocol",
			secret: "sk_live_7e3b",
			run: func(ctx context.Context, s txmanager.Session, secret string) error {
				_, err := s.DB().Exec(ctx, "INSERT INTO account VALUES ($1, $2)", pgx.QueryExecModeSimpleProtocol, 3, card{Number: secret})
				return err
			},
			kept: "unable to encode a value (withheld)",
		},
		{
			name:   "a row CopyFrom cannot encode",
			secret: "iban-DE89-3704",
			run: func(ctx context.Context, s txmanager.Session, secret string) error {
				_, err := s.DB().CopyFrom(ctx, pgx.Identifier{"account"}, []string{"id", "balance"}, pgx.CopyFromRows([][]any{{3, card{Number: secret}}}))
				return err
			},
			kept: "unable to encode a value (withheld)",
		},
		{
			name:   "input the server refused",
			secret: "token-5f1c9e",
			run: func(ctx context.Context, s txmanager.Session, secret string) error {
				_, err := s.DB().Exec(ctx, "INSERT INTO account VALUES (3, $1::text::bigint)", secret)
				return err
			},
			kept: "(SQLSTATE 22P02)",
		},
		{
			name:   "input the server refused, wrapped by the caller",
			secret: "password-a8d2",
			run: func(ctx context.Context, s txmanager.Session, secret string) error {
				_, err := s.DB().Exec(ctx, "SELECT $1::text::int", secret)
				return fmt.Errorf("loading the account: %w", err)
			},
			kept: "loading the account: ERROR: a data exception",
		},
		{
			name:   "a conflict names its constraint, no value",
			secret: "",
			run: func(ctx context.Context, s txmanager.Session, _ string) error {
				_, err := s.DB().Exec(ctx, "INSERT INTO account VALUES (1, 1)")
				return err
			},
			kept: `duplicate key value violates unique constraint "account_pkey" (SQLSTATE 23505)`,
		},
	}
	f := newFixture(t, txmanager.Config{})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("withheld.%d", i)
			err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithTraceName(name).WithRetries(0),
				func(ctx context.Context, s txmanager.Session) error { return tc.run(ctx, s, tc.secret) })
			if err == nil {
				t.Fatal("the statement succeeded; want it to fail")
			}
			if tc.secret != "" && !strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("the caller's error %q lost the value %q: it is the caller's to report", err, tc.secret)
			}
			logged := logLinesOf(f.logs.String(), name)
			if len(logged) == 0 {
				t.Fatalf("nothing logged for %s; logs:\n%s", name, f.logs.String())
			}
			var traced string
			for _, span := range f.spans.Ended() {
				if span.Name() != "db.tx."+name {
					continue
				}
				for _, event := range span.Events() {
					if event.Name == "exception" {
						traced = attrOf(event.Attributes, "exception.message")
					}
				}
			}
			if traced == "" {
				t.Fatalf("the span of %s recorded no exception", name)
			}
			for what, text := range map[string]string{"log": strings.Join(logged, "\n"), "span": traced} {
				if tc.secret != "" && strings.Contains(text, tc.secret) {
					t.Errorf("the %s carries the value %q: %s", what, tc.secret, text)
				}
				if !strings.Contains(text, tc.kept) {
					t.Errorf("the %s lost %q: %s", what, tc.kept, text)
				}
			}
		})
	}
}

// logLinesOf is the lines of logs about the transaction named name.
func logLinesOf(logs, name string) []string {
	var lines []string
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "tx_name="+name+" ") {
			lines = append(lines, line)
		}
	}
	return lines
}
