package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// faultEvent is one injected fault, for the report.
type faultEvent struct {
	at   time.Duration
	kind string
	node string
	note string
	when time.Time // wall clock of the fault, to relate it to the load's answers
	// began is when the fault started to bite, if before when: the standby's replication
	// paused ahead of the primary's death.
	began time.Time
	// failed: the fault could not be carried through (the formation did not heal).
	failed bool
	// promoted is when a database failover's new primary was up (zero for other faults).
	promoted time.Time
}

// start is when the fault began to bite.
func (ev faultEvent) start() time.Time {
	if !ev.began.IsZero() {
		return ev.began
	}
	return ev.when
}

// injectFaults runs a seeded schedule of faults until ctx ends: kill -9 and restart, pause
// past the lease (SIGSTOP, then SIGCONT), cut the node's database connections, and slow
// its database link. At most one node is hit at a time, so the cluster keeps a majority,
// and it is one that holds a signer lease whenever any does, so every fault can bite.
func injectFaults(ctx context.Context, c *cluster, seed uint64, leaseDuration time.Duration) []faultEvent {
	r := rand.New(rand.NewPCG(seed, 7))
	started := time.Now()
	var (
		mu     sync.Mutex
		events []faultEvent
	)
	record := func(kind string, n *node, note string) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, faultEvent{at: time.Since(started).Round(100 * time.Millisecond), kind: kind, node: n.name, note: note})
	}
	kinds := []string{"kill", "pause", "cut-db", "slow-db"}
	weighted := []string{"kill", "pause", "pause", "cut-db", "slow-db"}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return events
		case <-time.After(time.Duration(2000+r.IntN(3000)) * time.Millisecond):
		}
		candidates := c.running()
		if len(candidates) < len(c.nodes) {
			continue // the previous fault's node is not back yet
		}
		// A fault on a node that holds no lease proves nothing about fencing: aim at lease
		// holders whenever there are any.
		if holders, err := c.leaseHolders(ctx); err == nil {
			if held := slices.DeleteFunc(slices.Clone(candidates), func(n *node) bool { return !holders[n.name] }); len(held) > 0 {
				candidates = held
			}
		}
		n := candidates[r.IntN(len(candidates))]
		// Cycle through the kinds first so every one happens, then pick at random, pauses
		// twice as often: a pause past the lease is the fault fencing exists for.
		kind := kinds[i%len(kinds)]
		if i >= len(kinds) {
			kind = weighted[r.IntN(len(weighted))]
		}
		switch kind {
		case "kill":
			c.kill(n)
			down := time.Duration(1000+r.IntN(2000)) * time.Millisecond
			record(kind, n, fmt.Sprintf("SIGKILL, restarted after %s", down))
			sleep(ctx, down)
			if err := c.start(context.WithoutCancel(ctx), n); err != nil {
				record("restart-failed", n, err.Error())
			}
		case "pause":
			// Freeze the node in the middle of its work, as a long GC pause or a stalled VM
			// would: when it next broadcasts, on whichever chain, its link to that chain
			// holds the answer and the node is stopped while it waits. (If it broadcasts nothing within 2s, it is frozen
			// wherever it is.)
			paused := leaseDuration + time.Duration(1500+r.IntN(1500))*time.Millisecond
			heldBefore := n.heldBroadcasts()
			n.holdBroadcasts(paused + time.Second)
			midBroadcast := waitUntil(ctx, 2*time.Second, func() bool { return n.heldBroadcasts() > heldBefore }) == nil
			if err := c.pause(n); err != nil {
				n.holdBroadcasts(0)
				continue
			}
			where := "between tasks"
			if midBroadcast {
				where = "mid-broadcast"
			}
			record(kind, n, fmt.Sprintf("SIGSTOP %s for %s (lease %s), then SIGCONT", where, paused, leaseDuration))
			sleep(ctx, paused)
			n.holdBroadcasts(0)
			_ = c.resume(n)
		case "cut-db":
			cut, err := c.cutDatabase(ctx, n)
			note := fmt.Sprintf("pg_terminate_backend on %d sessions", cut)
			if err != nil {
				note = err.Error()
			}
			record(kind, n, note)
		case "slow-db":
			delay := time.Duration(100+r.IntN(300)) * time.Millisecond
			n.link.setDelay(delay)
			lasting := time.Duration(2000+r.IntN(3000)) * time.Millisecond
			record(kind, n, fmt.Sprintf("%s per packet on its database link for %s", delay, lasting))
			sleep(ctx, lasting)
			n.link.setDelay(0)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
