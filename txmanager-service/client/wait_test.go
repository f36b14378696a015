package txmclient_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// openTxService answers every read at once with a transaction still in flight, as a
// service with long-polls turned off (feed.maxWait 0) does.
type openTxService struct {
	v1.UnimplementedTxServiceServer
	reads atomic.Int64
}

func (s *openTxService) GetTx(_ context.Context, r *v1.GetTxRequest) (*v1.Tx, error) {
	s.reads.Add(1)
	return &v1.Tx{TxId: r.GetTxId(), State: "SUBMITTED"}, nil
}

// Wait against a service that answers before the long-poll is out waits between reads,
// growing, instead of asking as fast as it is answered.
func TestWaitBacksOffWhenAnsweredEarly(t *testing.T) {
	fake := &openTxService{}
	client := newClient(t, txmclient.Config{Endpoints: []string{serve(t, fake, nil)}, Backoff: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := client.Wait(ctx, "00000000-0000-7000-8000-000000000001"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want the context's deadline", err)
	}
	// 100 + 200 + 400 + 800 ms of waits fit in 1.5 s: at most 5 reads.
	if reads := fake.reads.Load(); reads < 2 || reads > 5 {
		t.Fatalf("%d reads in 1.5 s, want 2 to 5", reads)
	}
}

// tokenStreams serves WatchCompletions as the service does with JWTs: it accepts a stream
// (headers first), sends one completion after the cursor, then ends the stream UNAUTHENTICATED
// as the service does when the token that opened it expires.
type tokenStreams struct {
	v1.UnimplementedTxServiceServer
	// marks: after its completion a stream sends a mark 4 positions further (others'
	// completions it moved past).
	marks  bool
	mu     sync.Mutex
	tokens []string
	afters []string
}

func (s *tokenStreams) WatchCompletions(req *v1.WatchCompletionsRequest, stream grpc.ServerStreamingServer[v1.Completion]) error {
	md, _ := metadata.FromIncomingContext(stream.Context())
	s.mu.Lock()
	s.tokens = append(s.tokens, strings.Join(md.Get("authorization"), ""))
	s.afters = append(s.afters, req.GetAfter())
	s.mu.Unlock()
	if err := stream.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	next, _ := strconv.Atoi(req.GetAfter())
	if err := stream.Send(&v1.Completion{TxId: fmt.Sprint("tx-", next+1), Cursor: strconv.Itoa(next + 1)}); err != nil {
		return err
	}
	if s.marks {
		if err := stream.Send(&v1.Completion{Cursor: strconv.Itoa(next + 5)}); err != nil {
			return err
		}
	}
	return v1.ErrorUnauthenticated("the credential that opened this stream expired; open it again with a new one")
}

// A stream the service ends because its token expired is opened again at once with a fresh
// token, from the last completion handled: nothing is missed or seen twice.
func TestWatchReopensAStreamWhoseTokenExpired(t *testing.T) {
	tests := []struct {
		name                    string
		marks                   bool
		wantHandled, wantAfters string
	}{
		{name: "completions only", wantHandled: "[1 2 3]", wantAfters: "[ 1 2]"},
		// A mark is not handed to the handler; the stream is opened again from its cursor.
		{name: "with marks past others' completions", marks: true, wantHandled: "[1 6 11]", wantAfters: "[ 5 10]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { watchThroughExpiredTokens(t, tt.marks, tt.wantHandled, tt.wantAfters) })
	}
}

func watchThroughExpiredTokens(t *testing.T, marks bool, wantHandled, wantAfters string) {
	fake := &tokenStreams{marks: marks}
	var issued atomic.Int64
	client := newClient(t, txmclient.Config{Endpoints: []string{serve(t, fake, nil)},
		BearerToken: func(context.Context) (string, error) { return fmt.Sprint("token-", issued.Add(1)), nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errEnough := errors.New("three completions handled")
	var handled []string
	err := client.Watch(ctx, "", func(_ context.Context, c *v1.Completion) error {
		handled = append(handled, c.GetCursor())
		if len(handled) == 3 {
			return errEnough
		}
		return nil
	})
	fake.mu.Lock()
	defer fake.mu.Unlock()
	if !errors.Is(err, errEnough) || fmt.Sprint(handled) != wantHandled || fmt.Sprint(fake.afters) != wantAfters ||
		fmt.Sprint(fake.tokens) != "[Bearer token-1 Bearer token-2 Bearer token-3]" {
		t.Fatalf("Watch: %v, handled %v, streams after %q with %q; want three streams, each with a new token", err, handled, fake.afters, fake.tokens)
	}
}
