package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// Final states a transaction of this run must not reach: every transfer is valid and
// funded, so anything but CONFIRMED is the manager failing.
const (
	stateConfirmed   = "CONFIRMED"
	stateFailedFinal = "FAILED_FINAL"
	stateStuck       = "STUCK"
)

// processWatch names the processes the run needs; one exiting ends the wait at once
// instead of at the timeout.
type processWatch map[string]<-chan struct{}

func (w processWatch) check() error {
	for _, name := range slices.Sorted(maps.Keys(w)) {
		select {
		case <-w[name]:
			return fmt.Errorf("%s exited during the run (its log: -keep-logs)", name)
		default:
		}
	}
	return nil
}

// waitConfirmed reads every unfinished transaction back until all are CONFIRMED. It fails
// at once on FAILED_FINAL or STUCK, and at the deadline with a count of the states left.
func waitConfirmed(ctx context.Context, client *e2e.Client, txs []*createdTx, parallel int, watch processWatch, out io.Writer) error {
	pending := slices.Clone(txs)
	lastProgress := time.Now()
	for {
		readErr := readBack(ctx, client, pending, parallel)
		pending = slices.DeleteFunc(pending, func(tx *createdTx) bool { return tx.last.GetState() == stateConfirmed })
		for _, tx := range pending {
			if s := tx.last.GetState(); s == stateFailedFinal || s == stateStuck {
				return fmt.Errorf("tx %s (%s, nonce %d) is %s/%s: %s", tx.txID, tx.requestID, tx.nonce, s, tx.last.GetSubState(), tx.last.GetLastError())
			}
		}
		if len(pending) == 0 {
			return nil
		}
		if err := watch.check(); err != nil {
			return err
		}
		if time.Since(lastProgress) >= 5*time.Second {
			fmt.Fprintf(out, "    %d/%d confirmed; pending: %s\n", len(txs)-len(pending), len(txs), stateCounts(pending))
			lastProgress = time.Now()
		}
		select {
		case <-ctx.Done():
			msg := fmt.Sprintf("%d of %d transactions not CONFIRMED: %s", len(pending), len(txs), stateCounts(pending))
			if readErr != nil {
				msg += fmt.Sprintf("; last read error: %v", readErr)
			}
			return fmt.Errorf("%s%s: %w", msg, examples(pending, 3), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readBack refreshes tx.last for each transaction. A failed read keeps the previous state
// (the next round retries it) and is returned for the timeout message.
func readBack(ctx context.Context, client *e2e.Client, txs []*createdTx, parallel int) error {
	var (
		mu      sync.Mutex
		lastErr error
	)
	var g errgroup.Group
	g.SetLimit(parallel)
	for _, tx := range txs {
		g.Go(func() error {
			got, err := client.GetTx(ctx, tx.txID)
			if err != nil {
				mu.Lock()
				lastErr = fmt.Errorf("get %s: %w", tx.txID, err)
				mu.Unlock()
				return nil
			}
			tx.last = got
			return nil
		})
	}
	_ = g.Wait()
	return lastErr
}

// stateCounts is "TRACKING/BROADCAST=12, ALLOCATED=3".
func stateCounts(txs []*createdTx) string {
	counts := map[string]int{}
	for _, tx := range txs {
		key := tx.last.GetState()
		if sub := tx.last.GetSubState(); sub != "" {
			key += "/" + sub
		}
		counts[key]++
	}
	parts := make([]string, 0, len(counts))
	for _, key := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s=%d", key, counts[key]))
	}
	return strings.Join(parts, ", ")
}

// examples describes the first n transactions, so a timeout says where they are stuck.
func examples(txs []*createdTx, n int) string {
	var b strings.Builder
	for _, tx := range txs[:min(n, len(txs))] {
		fmt.Fprintf(&b, "\n    %s %s nonce %d: %s/%s attempts=%d hash=%s lastError=%q",
			tx.requestID, tx.txID, tx.nonce, tx.last.GetState(), tx.last.GetSubState(),
			tx.last.GetSubmitAttempts(), tx.last.GetTxHash(), tx.last.GetLastError())
	}
	return b.String()
}
