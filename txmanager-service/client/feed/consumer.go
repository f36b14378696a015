// Package feed applies txmanager-service's completions feed exactly once in the caller's
// own PostgreSQL database: each completion is handled in the same transaction
// (lingo-utils/txmanager) that moves the consumer's cursor past it. It is a module of its
// own so that callers of the core client (txmclient) do not pull in a database driver.
package feed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// Schema is the table a Consumer keeps its cursor in, in the caller's database; apply it
// with the caller's migrations.
const Schema = `CREATE TABLE IF NOT EXISTS txmanager_feed_cursor (
    consumer   text        PRIMARY KEY,
    cursor     text        NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
)`

// Handler applies one completion to the caller's data, on s (the same transaction that moves
// the cursor past it): both commit or neither does.
type Handler func(ctx context.Context, s txmanager.Session, c *v1.Completion) error

// Consumer reads the completions feed and applies each completion exactly once in the
// caller's database: the handler runs inside txmanager.WithinTx together with the cursor
// update, so a crash at any point leaves either both or neither, and a restart resumes
// after the last completion applied. Two consumers with the same name take turns (the
// cursor row is locked) and never apply a completion twice.
type Consumer struct {
	feed    Reader
	tx      txmanager.Manager
	name    string
	handler Handler
	// Wait is the long-poll bound of one read (default 25s).
	Wait time.Duration
	// Page is how many completions one read returns at most (default 100).
	Page uint32
}

// Reader reads pages of the completions feed; *txmclient.Client is one.
type Reader interface {
	ListCompletions(ctx context.Context, after string, limit uint32, wait time.Duration) (*v1.ListCompletionsResponse, error)
}

var _ Reader = (*txmclient.Client)(nil)

// NewConsumer builds a consumer named name (its cursor row) over the caller's database.
func NewConsumer(feed Reader, tx txmanager.Manager, name string, handler Handler) *Consumer {
	return &Consumer{feed: feed, tx: tx, name: name, handler: handler, Wait: 25 * time.Second, Page: 100}
}

// Run applies completions until ctx ends (it returns ctx's error) or the handler fails (it
// returns that error, the failing completion not applied and its cursor not moved).
func (c *Consumer) Run(ctx context.Context) error {
	for {
		cursor, err := c.cursor(ctx)
		if err != nil {
			return err
		}
		page, err := c.feed.ListCompletions(ctx, cursor, c.Page, c.Wait)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if again, after := txmclient.Retryable(err); again {
				sleep(ctx, max(after, time.Second))
				continue
			}
			return fmt.Errorf("feed: read completions after %q: %w", cursor, err)
		}
		last := cursor
		for _, completion := range page.GetCompletions() {
			if err := c.apply(ctx, completion); err != nil {
				return err
			}
			last = completion.GetCursor()
		}
		// The page's cursor may be past its last completion: a reader of some signers only
		// moves past other signers' completions, so its cursor keeps up with the feed (and
		// with retention) while its own signers are quiet.
		if ahead(page.GetNext(), last) {
			if err := c.advance(ctx, page.GetNext()); err != nil {
				return err
			}
		}
	}
}

// ahead reports whether cursor next is past cursor last ("" is the start).
func ahead(next, last string) bool {
	n, err := strconv.ParseInt(next, 10, 64)
	if err != nil {
		return false
	}
	l, err := strconv.ParseInt(last, 10, 64)
	return last == "" || (err == nil && n > l)
}

// advance moves the cursor forward to next, past completions this consumer is not given.
// Like apply, it never moves the cursor back.
func (c *Consumer) advance(ctx context.Context, next string) error {
	err := c.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("feed.advance").WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
		stored, err := c.lockCursor(ctx, s)
		if err != nil || !ahead(next, stored) {
			return err
		}
		_, err = s.DB().Exec(ctx, "UPDATE txmanager_feed_cursor SET cursor = $2, updated_at = now() WHERE consumer = $1", c.name, next)
		return err
	})
	if err != nil {
		return fmt.Errorf("feed: move the cursor of %s to %s: %w", c.name, next, err)
	}
	return nil
}

// lockCursor locks this consumer's cursor row, made when missing, and returns its cursor.
func (c *Consumer) lockCursor(ctx context.Context, s txmanager.Session) (string, error) {
	var stored string
	err := s.DB().QueryRow(ctx, "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = $1 FOR UPDATE", c.name).Scan(&stored)
	if !errors.Is(err, pgx.ErrNoRows) {
		return stored, err
	}
	if _, err := s.DB().Exec(ctx, "INSERT INTO txmanager_feed_cursor (consumer, cursor) VALUES ($1, '') ON CONFLICT DO NOTHING", c.name); err != nil {
		return "", err
	}
	err = s.DB().QueryRow(ctx, "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = $1 FOR UPDATE", c.name).Scan(&stored)
	return stored, err
}

// cursor reads where this consumer stands ("" before its first completion).
func (c *Consumer) cursor(ctx context.Context) (string, error) {
	var cursor string
	err := c.tx.WithinReadOnlyTx(ctx, txmanager.DefaultOptions().WithTraceName("feed.cursor"), func(ctx context.Context, s txmanager.Session) error {
		err := s.DB().QueryRow(ctx, "SELECT cursor FROM txmanager_feed_cursor WHERE consumer = $1", c.name).Scan(&cursor)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("feed: read cursor of %s: %w", c.name, err)
	}
	return cursor, nil
}

// apply runs the handler and moves the cursor in one transaction. The cursor row is locked
// first and compared: a completion at or below it was applied already (by a consumer of
// the same name that got there first) and is skipped.
func (c *Consumer) apply(ctx context.Context, completion *v1.Completion) error {
	position, err := strconv.ParseInt(completion.GetCursor(), 10, 64)
	if err != nil {
		return fmt.Errorf("feed: completion %s has cursor %q: %w", completion.GetTxId(), completion.GetCursor(), err)
	}
	opts := txmanager.DefaultOptions().WithTraceName("feed.apply").WithRetries(3)
	err = c.tx.WithinTx(ctx, opts, func(ctx context.Context, s txmanager.Session) error {
		stored, err := c.lockCursor(ctx, s)
		if err != nil {
			return err
		}
		if applied, _ := strconv.ParseInt(stored, 10, 64); stored != "" && position <= applied {
			return nil
		}
		if err := c.handler(ctx, s, completion); err != nil {
			return err
		}
		_, err = s.DB().Exec(ctx, "UPDATE txmanager_feed_cursor SET cursor = $2, updated_at = now() WHERE consumer = $1", c.name, completion.GetCursor())
		return err
	})
	if err != nil {
		return fmt.Errorf("feed: apply completion %s: %w", completion.GetTxId(), err)
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
