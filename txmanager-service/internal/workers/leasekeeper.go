package workers

import (
	"context"
	"sync"
	"time"
)

// LeaseTicker is the part of services.LeaseManager the keeper drives.
type LeaseTicker interface {
	Tick(ctx context.Context)
}

// LeaseKeeper renews in-use leases, releases idle ones and applies local fencing every
// renew interval.
type LeaseKeeper struct {
	leases   LeaseTicker
	interval time.Duration
	stop     chan struct{}
	wg       sync.WaitGroup
}

// NewLeaseKeeper builds the keeper.
func NewLeaseKeeper(leases LeaseTicker, interval time.Duration) *LeaseKeeper {
	return &LeaseKeeper{leases: leases, interval: interval, stop: make(chan struct{})}
}

// Start launches the loop.
func (k *LeaseKeeper) Start(ctx context.Context) {
	ctx = context.WithoutCancel(ctx)
	k.wg.Add(1)
	go func() {
		defer k.wg.Done()
		ticker := time.NewTicker(k.interval)
		defer ticker.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-ticker.C:
				tickCtx, cancel := context.WithTimeout(ctx, k.interval)
				k.leases.Tick(tickCtx)
				cancel()
			}
		}
	}()
}

// Stop ends the loop and waits for it.
func (k *LeaseKeeper) Stop() {
	select {
	case <-k.stop:
	default:
		close(k.stop)
	}
	k.wg.Wait()
}
