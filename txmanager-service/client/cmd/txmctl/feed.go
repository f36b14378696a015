package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

func newFeedCommand(o *options) *cobra.Command {
	cmd := &cobra.Command{Use: "feed", Short: "the completions feed: every final result, in order"}
	var after string
	var fromStart bool
	var count int
	tail := &cobra.Command{
		Use:   "tail [--after <cursor> | --from-start] [--count N]",
		Short: "print completions as they happen (from now on, from a cursor, or from the start)",
		Long: `Print completions as they happen, one per line (JSON Lines with --json), following the
stream across reconnects. From now on by default; --after resumes after a cursor printed
earlier, --from-start begins with the oldest completion retention kept. --count stops
after that many. When it stops, it prints the cursor to resume from on stderr: that of the
last completion printed, or a later one where the stream moved past completions of
signers the credential does not see (a cursor retention keeps while those signers are
quiet).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if fromStart && after != "" {
				return &usageError{"feed tail: --after and --from-start exclude each other"}
			}
			ctx, cancel := o.deadline(cmd.Context(), 0)
			defer cancel()
			cursor := after
			if !fromStart && after == "" {
				var err error
				if cursor, err = o.feedEnd(ctx); err != nil {
					return err
				}
			}
			return o.tail(ctx, cursor, count, cmd.ErrOrStderr())
		},
	}
	tail.Flags().StringVar(&after, "after", "", "resume after this cursor (a completion's cursor)")
	tail.Flags().BoolVar(&fromStart, "from-start", false, "begin with the oldest completion kept")
	tail.Flags().IntVar(&count, "count", 0, "stop after this many completions (0: never)")
	cmd.AddCommand(tail)
	return cmd
}

// feedEnd pages through the feed to its end: the cursor after the latest completion.
func (o *options) feedEnd(ctx context.Context) (string, error) {
	cursor := ""
	for {
		page, err := o.client.ListCompletions(ctx, cursor, 1000, 0)
		if err != nil {
			return "", err
		}
		if page.GetNext() != "" {
			cursor = page.GetNext()
		}
		if len(page.GetCompletions()) == 0 {
			return cursor, nil
		}
	}
}

var errCountReached = errors.New("count reached")

func (o *options) tail(ctx context.Context, cursor string, count int, stderr io.Writer) error {
	// A stream cannot be aligned after the fact: fixed widths instead of a table.
	const row = "%-10s %-20s %-6s %-36s %-42s %-6s %-12s %-8s %-66s %s\n"
	if !o.json {
		fmt.Fprintf(o.out, row, "CURSOR", "COMPLETED", "CHAIN", "TX ID", "SIGNER", "NONCE", "STATUS", "BLOCK", "TX HASH", "FEE (WEI)")
	}
	printed := 0
	resume := cursor
	defer func() {
		if resume != "" {
			fmt.Fprintf(stderr, "feed tail: resume with --after %s\n", resume)
		}
	}()
	err := o.client.Watch(ctx, cursor, func(_ context.Context, c *v1.Completion) error {
		resume = c.GetCursor()
		if o.json {
			if err := writeJSONLine(o.out, c); err != nil {
				return err
			}
		} else {
			status := c.GetStatus()
			if c.GetPlaceholder() {
				status += " (placeholder)"
			}
			if _, err := fmt.Fprintf(o.out, row, c.GetCursor(), when(c.GetCompletedAt()), fmt.Sprint(c.GetChainId()), c.GetTxId(), c.GetSigner(),
				fmt.Sprint(c.GetNonce()), status, fmt.Sprint(c.GetBlockNumber()), c.GetTxHash(), orDash(c.GetFee())); err != nil {
				return err
			}
		}
		if printed++; count > 0 && printed >= count {
			return errCountReached
		}
		return nil
	}, txmclient.OnMark(func(_ context.Context, mark string) error {
		resume = mark
		return nil
	}))
	if errors.Is(err, errCountReached) {
		return nil
	}
	return err
}
