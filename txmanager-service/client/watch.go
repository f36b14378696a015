package txmclient

import (
	"context"
	"errors"
	"io"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// Watch calls fn with each completion of the feed after the cursor after ("" = from the
// start of the feed), in feed order, as completions happen, until ctx ends (it returns
// ctx's error), fn or OnMark's function fails (it returns that error) or the service
// refuses the watch for good (CURSOR_EXPIRED, PERMISSION_DENIED, ...).
//
// A broken stream is opened again, on the next endpoint when there are several, after the
// last completion fn accepted: feed positions are the same on every node, so fn sees each
// completion once across reconnects, restarts and nodes. To resume after this process
// itself stops, keep the cursor of the last completion handled (Completion.Cursor) and
// pass it as after; the feed consumer module does that in the caller's database. A caller
// whose credential is limited to some signers stores marks too (OnMark): retention deletes
// completions by age, so the cursor of its own last completion expires while its signers
// are quiet, and a restart from it would be refused with CURSOR_EXPIRED.
func (c *Client) Watch(ctx context.Context, after string, fn func(context.Context, *v1.Completion) error, opts ...WatchOption) error {
	var o watchOptions
	for _, opt := range opts {
		opt(&o)
	}
	cursor, current := after, 0
	backoff := c.cfg.Backoff
	// expiredEmpty: the last stream ended on its token's expiry having delivered nothing.
	expiredEmpty := false
	// credentialFailures counts the token provider's failures in a row.
	credentialFailures := 0
	for {
		delivered, opened, err := c.watchOnce(ctx, c.nodes[current%len(c.nodes)], &cursor, fn, o.mark)
		var handlerErr *handlerError
		var credentialsErr *credentialsError
		noCredentials := errors.As(err, &credentialsErr)
		// expired: the service ended the stream because the token that opened it expired
		// (one refused at the door was never opened, and ends Watch).
		expired := opened && v1.IsUnauthenticated(err)
		switch {
		case errors.As(err, &handlerErr):
			return handlerErr.err
		case ctx.Err() != nil:
			return errors.Join(err, ctx.Err())
		case expired && c.cfg.BearerToken != nil && (delivered || !expiredEmpty):
			// Opened again at once with a fresh token. Not twice in a row without a
			// delivery: a provider that hands back a token already past its expiry (the
			// service lets one through at the door for a little while, and ends its stream
			// at once) would otherwise be asked in a tight loop.
			expiredEmpty = !delivered
			continue
		}
		expiredEmpty = expired && !delivered
		if noCredentials {
			credentialFailures++
		} else {
			credentialFailures = 0
		}
		again, wait := Retryable(err)
		switch {
		case noCredentials && credentialFailures >= c.cfg.MaxAttempts:
			return err
		case noCredentials || expired:
			// The token provider failed (an identity service restarting), or handed back a
			// token already past its expiry: asked again after a wait, as a broken stream
			// is; a failing provider up to the attempts a call gets, an expired token until
			// the service's leeway for it is over and it is refused at the door.
			again = true
		}
		// A stream the service ended (it is stopping) is picked up again like a broken one.
		if !again && !errors.Is(err, io.EOF) {
			return err
		}
		current++
		if delivered {
			backoff = c.cfg.Backoff
		}
		if wait == 0 {
			wait = backoff
			backoff = min(backoff*2, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// WatchOption changes what Watch hands its caller.
type WatchOption func(*watchOptions)

type watchOptions struct {
	mark func(ctx context.Context, cursor string) error
}

// OnMark has Watch call mark with a cursor each time the stream moves past completions the
// caller's credential does not see (other signers'). Storing it, as the cursor of a
// completion handled, keeps a resume point that retention does not delete while the
// caller's own signers are quiet. mark's error ends Watch, as fn's does.
func OnMark(mark func(ctx context.Context, cursor string) error) WatchOption {
	return func(o *watchOptions) { o.mark = mark }
}

// handlerError carries fn's error out of the stream loop untouched.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }

// credentialsError: the credentials for a stream could not be had (the token provider
// failed).
type credentialsError struct{ err error }

func (e *credentialsError) Error() string { return "credentials: " + e.err.Error() }
func (e *credentialsError) Unwrap() error { return e.err }

// watchOnce follows one stream until it breaks, moving *cursor past every completion fn
// accepted, and reports whether it delivered any and whether the service had accepted the
// stream (its first answer was not a refusal).
func (c *Client) watchOnce(ctx context.Context, n node, cursor *string, fn func(context.Context, *v1.Completion) error, mark func(context.Context, string) error) (delivered, opened bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The credentials go on the stream's call alone: fn gets the caller's context, so its
	// own calls (to this client or to other services) neither carry this client's API key
	// or token nor add a second one to theirs.
	callCtx, err := c.withCredentials(ctx)
	if err != nil {
		return false, false, &credentialsError{err}
	}
	stream, err := n.tx.WatchCompletions(callCtx, &v1.WatchCompletionsRequest{After: *cursor})
	if err != nil {
		return false, false, err
	}
	// The service sends a stream's headers once it has accepted it (a refusal comes back
	// without them, with the first Recv).
	if md, _ := stream.Header(); md != nil {
		opened = true
	}
	for {
		completion, err := stream.Recv()
		if err != nil {
			return delivered, opened, err
		}
		if completion.GetTxId() == "" {
			// A mark: the stream moved past others' completions. Resuming from it keeps the
			// cursor ahead of retention while this caller's signers are quiet.
			if mark != nil {
				if err := mark(ctx, completion.GetCursor()); err != nil {
					return delivered, opened, &handlerError{err}
				}
			}
			*cursor = completion.GetCursor()
			continue
		}
		if err := fn(ctx, completion); err != nil {
			return delivered, opened, &handlerError{err}
		}
		*cursor, delivered = completion.GetCursor(), true
	}
}
