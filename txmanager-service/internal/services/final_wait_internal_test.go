package services

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// What a wait for a final transaction answers, and what wakes it: the feed's notifier (the
// poll interval here is an hour, so nothing else can), a final state at once, a read error
// at once, the wait (cut to MaxWait) otherwise.
func TestFinalWaitRead(t *testing.T) {
	errRead := errors.New("database gone")
	tests := []struct {
		name       string
		states     []domain.State // what each read returns, the last one repeated
		readErr    error
		wait       time.Duration
		broadcast  bool // the feed positions something after the first read
		wantState  domain.State
		wantReads  int64
		wantErr    error
		validation bool
	}{
		{"final at once", []domain.State{domain.StateConfirmed}, nil, time.Hour, false, domain.StateConfirmed, 1, nil, false},
		{"failed final at once", []domain.State{domain.StateFailedFinal}, nil, time.Hour, false, domain.StateFailedFinal, 1, nil, false},
		{"woken by the feed", []domain.State{domain.StateTracking, domain.StateConfirmed}, nil, time.Hour, true, domain.StateConfirmed, 2, nil, false},
		{"no wait: one read", []domain.State{domain.StateTracking}, nil, 0, false, domain.StateTracking, 1, nil, false},
		// Read once, and once more when the (cut) wait runs out.
		{"a wait beyond MaxWait is cut to it", []domain.State{domain.StateTracking}, nil, time.Hour, false, domain.StateTracking, 2, nil, false},
		{"a read error ends it", nil, errRead, time.Hour, false, "", 1, errRead, false},
		{"a negative wait is refused", nil, nil, -time.Second, false, "", 0, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notify := NewFeedNotifier()
			w := NewFinalWait(notify, FeedConfig{MaxWait: 50 * time.Millisecond, PollInterval: time.Hour})
			if tt.broadcast {
				w.cfg.MaxWait = time.Hour
			}
			var reads atomic.Int64
			read := func(context.Context) (domain.ManagedTx, error) {
				n := reads.Add(1)
				if tt.readErr != nil {
					return domain.ManagedTx{}, tt.readErr
				}
				state := tt.states[min(int(n), len(tt.states))-1]
				if n == 1 && tt.broadcast {
					go notify.Broadcast()
				}
				return domain.ManagedTx{State: state}, nil
			}
			tx, err := w.Read(context.Background(), tt.wait, read)
			var validation *domain.ValidationError
			switch {
			case tt.validation:
				if !errors.As(err, &validation) || validation.Field != "wait" {
					t.Fatalf("error %v, want a validation error on wait", err)
				}
			case !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if tx.State != tt.wantState || reads.Load() != tt.wantReads {
				t.Fatalf("answered %q after %d reads, want %q after %d", tx.State, reads.Load(), tt.wantState, tt.wantReads)
			}
		})
	}
}
