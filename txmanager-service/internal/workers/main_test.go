package workers_test

import (
	"io"
	"os"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/txmanager-service/internal/workers"
)

// The loops' tests drive real stages on a real PostgreSQL (a fresh database each) and the
// embedded chain; pgtest stops what it started once the binary's tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// testLogger keeps the loops' logs out of the test output unless -v asks for them.
func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// waitFor waits up to timeout for cond, failing t with what it waited for.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// loopConfig paces every loop at interval.
func loopConfig(interval time.Duration) workers.Intervals {
	return workers.Intervals{LeaseRenew: interval, Heartbeat: interval, FeedSequence: interval, Retention: interval, FundsGauge: interval}
}
