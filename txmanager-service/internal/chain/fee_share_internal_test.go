package chain

import (
	"context"
	"errors"
	"math/big"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// countingFees is a fee source that counts its fetches and answers base fee = fetch number.
type countingFees struct {
	fetches atomic.Int64
	// release, when set, holds every fetch until it is closed.
	release chan struct{}
	err     error
}

func (c *countingFees) fetch(ctx context.Context) (services.FeeSuggestion, error) {
	n := c.fetches.Add(1)
	if c.release != nil {
		select {
		case <-c.release:
		case <-ctx.Done():
			return services.FeeSuggestion{}, ctx.Err()
		}
	}
	if c.err != nil {
		return services.FeeSuggestion{}, c.err
	}
	return services.FeeSuggestion{BaseFee: big.NewInt(n), TipCap: big.NewInt(1)}, nil
}

func TestSharedFees(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		run  func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees)
	}{
		{"callers within the max age share one fetch", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			for range 5 {
				fees, err := s.get(ctx, src.fetch)
				if err != nil || fees.BaseFee.Int64() != 1 {
					t.Fatalf("fees %v, %v; want the first fetch's", fees.BaseFee, err)
				}
			}
			if n := src.fetches.Load(); n != 1 {
				t.Fatalf("%d fetches, want 1", n)
			}
		}},
		{"a suggestion older than the max age is fetched again", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			_, _ = s.get(ctx, src.fetch)
			*clock = clock.Add(time.Second)
			fees, err := s.get(ctx, src.fetch)
			if err != nil || fees.BaseFee.Int64() != 2 {
				t.Fatalf("fees %v, %v; want a second fetch", fees.BaseFee, err)
			}
		}},
		{"concurrent callers wait for the running fetch", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			src.release = make(chan struct{})
			var wg sync.WaitGroup
			results := make([]int64, 8)
			for i := range results {
				wg.Go(func() {
					fees, err := s.get(ctx, src.fetch)
					if err == nil {
						results[i] = fees.BaseFee.Int64()
					}
				})
			}
			time.Sleep(50 * time.Millisecond)
			close(src.release)
			wg.Wait()
			if n := src.fetches.Load(); n != 1 {
				t.Fatalf("%d fetches for 8 concurrent callers, want 1", n)
			}
			for i, r := range results {
				if r != 1 {
					t.Fatalf("caller %d got base fee %d, want the shared fetch's 1", i, r)
				}
			}
		}},
		{"a failure is not kept", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			src.err = errors.New("node down")
			if _, err := s.get(ctx, src.fetch); err == nil {
				t.Fatal("want the fetch's error")
			}
			src.err = nil
			fees, err := s.get(ctx, src.fetch)
			if err != nil || fees.BaseFee.Int64() != 2 {
				t.Fatalf("fees %v, %v; want a new fetch after a failure", fees.BaseFee, err)
			}
		}},
		{"a caller giving up does not end the fetch the others wait for", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			src.release = make(chan struct{})
			firstCtx, cancelFirst := context.WithCancel(ctx)
			firstDone := make(chan error, 1)
			go func() { _, err := s.get(firstCtx, src.fetch); firstDone <- err }()
			for src.fetches.Load() == 0 {
				time.Sleep(time.Millisecond)
			}
			secondDone := make(chan int64, 1)
			go func() {
				fees, err := s.get(ctx, src.fetch)
				if err != nil {
					secondDone <- -1
					return
				}
				secondDone <- fees.BaseFee.Int64()
			}()
			time.Sleep(20 * time.Millisecond)
			cancelFirst()
			if err := <-firstDone; !errors.Is(err, context.Canceled) {
				t.Fatalf("first caller: %v, want its cancellation", err)
			}
			close(src.release)
			if got := <-secondDone; got != 1 {
				t.Fatalf("second caller got base fee %d, want the one fetch's (1)", got)
			}
			if n := src.fetches.Load(); n != 1 {
				t.Fatalf("%d fetches, want the first caller's one to finish for the other", n)
			}
		}},
		{"a fetch that panics fails its callers, and the next caller fetches again", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			panicking := func(context.Context) (services.FeeSuggestion, error) { panic("unexpected answer") }
			if _, err := s.get(ctx, panicking); err == nil {
				t.Fatal("want the panic as an error")
			}
			fees, err := s.get(ctx, src.fetch)
			if err != nil || fees.BaseFee.Int64() != 1 {
				t.Fatalf("fees %v, %v; want a new fetch", fees.BaseFee, err)
			}
		}},
		{"callers cannot change each other's numbers", func(t *testing.T, s *sharedFees, clock *time.Time, src *countingFees) {
			first, _ := s.get(ctx, src.fetch)
			first.BaseFee.SetInt64(1000)
			second, _ := s.get(ctx, src.fetch)
			if second.BaseFee.Int64() != 1 {
				t.Fatalf("base fee %d after another caller changed its copy, want 1", second.BaseFee.Int64())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := time.Unix(1_700_000_000, 0)
			s := newSharedFees(500 * time.Millisecond)
			s.now = func() time.Time { return clock }
			tt.run(t, s, &clock, &countingFees{})
		})
	}
}
