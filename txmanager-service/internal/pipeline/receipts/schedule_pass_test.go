package receipts_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// pollInterval is the tests' receipt poll interval: short, so what was not found is due
// again almost at once.
const pollInterval = 20 * time.Millisecond

// newSchedule is the receipt schedule over tracker, with lookups due every pollInterval.
func (s *stage) newSchedule(tracker *receipts.Tracker, blockScanMinPending int) *receipts.Schedule {
	return receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: pollInterval, Workers: 2, BatchSize: 3, MaxBackoff: time.Second,
		BlockScanMinPending: blockScanMinPending}, tracker, s.logger)
}

// pass waits until what the last pass did not find is due again, then runs a pass for the
// leases this node holds.
func (s *stage) pass(schedule *receipts.Schedule) bool {
	time.Sleep(pollInterval + 5*time.Millisecond)
	return schedule.Pass(ctx(s.t), s.node.Leases.Held())
}

// With many transactions awaiting receipts, each new block's receipts are read whole, one
// call for the block, instead of one look-up per hash; with few, each is looked up by hash.
// Either way every receipt is recorded and finality is woken.
func TestSchedulePassFindsReceiptsByHashOrByBlock(t *testing.T) {
	t.Parallel()
	const awaiting = 8
	tests := []struct {
		name                string
		blockScanMinPending int
		// wantCalls bounds the chain calls of the pass after the block: at most (whole
		// blocks) or at least (by hash) one per transaction.
		wantAtMost, wantAtLeast int64
	}{
		{name: "many awaiting: the new block read whole", blockScanMinPending: awaiting, wantAtMost: 2},
		{name: "few awaiting: looked up by hash", blockScanMinPending: awaiting + 1, wantAtLeast: awaiting},
		{name: "block reads off: looked up by hash", wantAtLeast: awaiting},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(awaiting, nil)
			schedule := s.newSchedule(s.tracker(receipts.Config{Confirmations: 20}), tc.blockScanMinPending)
			if s.pass(schedule) {
				t.Fatal("a pass that found nothing woke finality")
			}
			head := s.mine(1)

			calls := s.chain.RequestCount()
			if !s.pass(schedule) {
				t.Fatal("a pass that recorded receipts did not wake finality")
			}
			calls = s.chain.RequestCount() - calls
			if (tc.wantAtMost > 0 && calls > tc.wantAtMost) || calls < tc.wantAtLeast {
				t.Fatalf("the pass made %d chain calls, want at most %d and at least %d", calls, tc.wantAtMost, tc.wantAtLeast)
			}
			for _, row := range s.rows() {
				if row.subState != "MINED" || row.block != head || row.receiptHash != row.hash {
					t.Fatalf("row %+v, want its receipt in block %d on record", row, head)
				}
			}
			// Everything found, nothing held: the next pass has nothing to do.
			if s.pass(schedule) {
				t.Fatal("a pass with nothing awaiting woke finality")
			}
		})
	}
}

// While receipts are held for their final write, every new head wakes finality even when
// the pass finds nothing: the block that makes them final usually brings no receipt of
// this node's.
func TestSchedulePassWakesFinalityOnANewHeadWhileHolding(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(1, nil)
	tracker := s.tracker(receipts.Config{Confirmations: 3})
	schedule := s.newSchedule(tracker, 0)
	s.mine(1)
	steps := []struct {
		name     string
		mine     int
		wantWake bool
	}{
		{name: "the receipt found and held", wantWake: true},
		{name: "no new block", wantWake: false},
		{name: "a new block", mine: 1, wantWake: true},
		{name: "the same head again", wantWake: false},
	}
	for _, step := range steps {
		s.mine(step.mine)
		if got := s.pass(schedule); got != step.wantWake {
			t.Fatalf("%s: wake finality = %v, want %v", step.name, got, step.wantWake)
		}
		if !tracker.HoldsReceipts() {
			t.Fatalf("%s: the receipt is not held", step.name)
		}
	}
	s.mine(1)
	if !s.pass(schedule) {
		t.Fatal("the block that makes it final did not wake finality")
	}
	if _, err := tracker.AdvanceFinality(ctx(t), s.signers()); err != nil {
		t.Fatal(err)
	}
	if row := s.row(0); row.state != string(domain.StateConfirmed) || tracker.HoldsReceipts() {
		t.Fatalf("row %+v (held %v), want CONFIRMED and nothing held", row, tracker.HoldsReceipts())
	}
}

// A stage that stores a new attempt (a replacement) asks the schedule to re-read: the next
// pass looks up the new hash too, and the replacement's receipt is recorded.
func TestSchedulePassFollowsAReplacement(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(1, nil)
	schedule := s.newSchedule(s.tracker(receipts.Config{Confirmations: 20}), 0)
	if s.pass(schedule) {
		t.Fatal("a pass that found nothing woke finality")
	}
	replacement := s.resign(0, pipeline.AttemptReplace)
	schedule.RefreshSoon()
	head := s.mine(1)

	if !s.pass(schedule) {
		t.Fatal("the replacement's receipt did not wake finality")
	}
	if row := s.row(0); row.subState != "MINED" || row.block != head || row.receiptHash != replacement {
		t.Fatalf("row %+v, want the replacement's receipt %s on record", row, replacement.Hex())
	}
}

// Transactions the submitting stage stores are scheduled as they are stored, before any
// re-read of the database could find them; a node that no longer holds a signer's lease
// stops looking that signer's transactions up.
func TestSchedulePassFollowsTheLeasesHeld(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	// A long poll interval: the schedule's backstop re-read of the database (ten polls) does
	// not come during the test, so only the submitting stage can tell it of new transactions.
	schedule := receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: time.Second, Workers: 1, BatchSize: 8}, s.tracker(receipts.Config{Confirmations: 20}),
		s.logger)
	if s.pass(schedule) {
		t.Fatal("a pass with nothing awaiting woke finality")
	}
	s.send(1, schedule.TrackUnsent)
	head := s.mine(1)
	if !s.pass(schedule) || s.row(0).block != head {
		t.Fatalf("row %+v, want the transaction stored after the schedule's re-read found in block %d", s.row(0), head)
	}

	s.send(1, schedule.TrackUnsent) // nonce 1
	if err := s.node.Leases.LetGo(ctx(t), s.lease.Signer); err != nil {
		t.Fatal(err)
	}
	s.mine(1)
	calls := s.chain.RequestCount()
	if s.pass(schedule) {
		t.Fatal("a pass for no lease woke finality")
	}
	if calls = s.chain.RequestCount() - calls; calls != 0 || s.row(1).block != 0 {
		t.Fatalf("%d chain calls, row %+v; want the transaction left to the lease's next owner, not looked up", calls, s.row(1))
	}
}

// A look-up the node fails (a node still building its transaction index) backs the
// transaction off exponentially, behind everything else, where a transaction simply not
// found yet is due again after one poll interval; once its back-off has passed it is
// looked up again and found.
func TestSchedulePassBacksOffFailedLookUps(t *testing.T) {
	t.Parallel()
	s := newStageAtGenesis(t)
	s.send(1, nil)
	// Long enough that a loaded machine does not blur one poll interval with the two a
	// first failure backs off.
	const poll = time.Second
	schedule := receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: poll, Workers: 1, BatchSize: 8, MaxBackoff: time.Minute},
		s.tracker(receipts.Config{Confirmations: 20}), s.logger)
	if schedule.Pass(ctx(t), s.node.Leases.Held()) {
		t.Fatal("a pass whose look-ups failed woke finality")
	}
	failed := time.Now()
	head := s.mine(1) // the node indexes transactions from its first block on

	// Past one poll interval (a transaction not found would be due again), short of two.
	time.Sleep(time.Until(failed.Add(poll + poll/2)))
	calls := s.chain.RequestCount()
	if schedule.Pass(ctx(t), s.node.Leases.Held()) || s.chain.RequestCount() != calls {
		t.Fatalf("the pass made %d chain calls, want none: the failed look-up is not due before its back-off ends", s.chain.RequestCount()-calls)
	}
	time.Sleep(time.Until(failed.Add(2*poll + poll/2)))
	if !schedule.Pass(ctx(t), s.node.Leases.Held()) || s.row(0).block != head {
		t.Fatalf("row %+v after the back-off, want its receipt in block %d on record", s.row(0), head)
	}
}

// A node that cannot be reached records nothing and wakes nothing: a mined transaction
// stays unrecorded until a node answers.
func TestSchedulePassWithTheNodeUnreachable(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(1, nil)
	s.mine(1)
	schedule := s.newSchedule(s.tracker(receipts.Config{Confirmations: 20}), 0)
	if err := s.sim.Close(); err != nil {
		t.Fatal(err)
	}
	for pass := range 2 {
		if s.pass(schedule) {
			t.Fatalf("pass %d without the node woke finality", pass+1)
		}
	}
	if row := s.row(0); row.block != 0 || row.state != string(domain.StateTracking) {
		t.Fatalf("row %+v, want nothing recorded", row)
	}
}

// The schedule's loop runs faster than the poll interval, so what falls due is looked up
// soon after; never faster than every 50 ms.
func TestScheduleTick(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		poll, want time.Duration
	}{
		{time.Second, 250 * time.Millisecond},
		{100 * time.Millisecond, 50 * time.Millisecond},
	} {
		if got := receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: tc.poll}, nil, testsupport.QuietLogger()).Tick(); got != tc.want {
			t.Errorf("Tick with a %s poll interval = %s, want %s", tc.poll, got, tc.want)
		}
	}
}

// A node that answers it has no eth_getBlockReceipts sends the schedule to look-ups by
// hash, for BlockScanRetry only: an endpoint behind a balancer, or an upgraded node, may
// serve whole blocks later, and then they are read whole again.
func TestSchedulePassTriesWholeBlocksAgainAfterTheNodeRefusedThem(t *testing.T) {
	t.Parallel()
	const awaiting = 6
	s := stageOn(t, testsupport.NewSignerStage(t, testsupport.SignerStageOptions{DevAccounts: 2, ServeHTTP: true}))
	proxy, err := faultproxy.Start(s.sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	client, err := rpc.DialHTTP(proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	s.chain = chain.NewRPCChain(client, chain.WithMaxBatchSize(1))
	// Long enough that the first two steps fit in it on a slow, busy machine.
	const retry = 2 * time.Second
	schedule := receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: pollInterval, Workers: 2, BatchSize: 3, MaxBackoff: time.Second,
		BlockScanMinPending: awaiting, BlockScanRetry: retry}, s.tracker(receipts.Config{Confirmations: 20}), s.logger)
	if err := proxy.SetMode(faultproxy.NoBlockReceipts); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		mode faultproxy.Mode
		wait time.Duration
		// byBlock: the pass after the new block reads it whole (at most 3 requests: the
		// head, the block, and a look-up); otherwise each transaction is looked up by hash.
		byBlock bool
	}{
		{name: "the node refuses block receipts: looked up by hash", mode: faultproxy.NoBlockReceipts},
		{name: "the node serves them, within the retry time: still by hash", mode: faultproxy.Pass},
		{name: "after the retry time: read whole again", mode: faultproxy.Pass, wait: retry, byBlock: true},
	}
	for _, step := range steps {
		if err := proxy.SetMode(step.mode); err != nil {
			t.Fatal(err)
		}
		time.Sleep(step.wait)
		s.send(awaiting, nil)
		schedule.RefreshSoon()
		s.pass(schedule) // learns of them
		s.mine(1)
		before := proxy.Requests()
		s.pass(schedule)
		requests := proxy.Requests() - before
		if step.byBlock != (requests <= 3) {
			t.Fatalf("%s: %d requests for %d transactions in a new block", step.name, requests, awaiting)
		}
		for _, row := range s.rows() {
			if row.subState != "MINED" {
				t.Fatalf("%s: row %+v, want its receipt on record", step.name, row)
			}
		}
	}
}

// failingOnce is the receipt store whose first write of receipts fails (the database cut
// for a moment).
type failingOnce struct {
	receipts.Store
	failed atomic.Bool
}

func (f *failingOnce) RecordReceipts(ctx context.Context, lease domain.Lease, found []receipts.FoundReceipt) (int, error) {
	if len(found) > 0 && f.failed.CompareAndSwap(false, true) {
		return 0, errors.New("connection reset by peer")
	}
	return f.Store.RecordReceipts(ctx, lease, found)
}

// Receipts found but not written (the write failed) stay scheduled and are looked up again
// at the next pass, by hash or in the next block read, instead of waiting for the backstop
// re-read of everything awaiting.
func TestReceiptsNotWrittenAreLookedUpAgain(t *testing.T) {
	t.Parallel()
	eachLookUp(t, func(t *testing.T, s *stage, blockScan int) {
		tracker := receipts.New(receipts.Config{Confirmations: 20}, &failingOnce{Store: s.store}, s.chain, s.node.Leases, telemetry.Noop(), s.logger)
		schedule := s.newSchedule(tracker, blockScan)
		s.pass(schedule)
		head := s.mine(1)
		s.pass(schedule) // finds them; the write fails
		s.pass(schedule)
		s.wantMinedIn(head)
	})
}

// eachLookUp runs test on a stage with two transactions sent, once with receipts read in
// whole blocks and once looked up by hash.
func eachLookUp(t *testing.T, test func(t *testing.T, s *stage, blockScan int)) {
	t.Helper()
	for _, blockScan := range []int{1, 0} {
		t.Run(map[int]string{1: "read in whole blocks", 0: "looked up by hash"}[blockScan], func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(2, nil)
			test(t, s, blockScan)
		})
	}
}

// wantMinedIn fails the test unless every row's receipt in block head is on record.
func (s *stage) wantMinedIn(head uint64) {
	s.t.Helper()
	for _, row := range s.rows() {
		if row.subState != "MINED" || row.block != head {
			s.t.Fatalf("row %+v after the next pass, want its receipt in block %d on record", row, head)
		}
	}
}

// leaseDropper is the stage's chain, after which the node stops trusting the signer's lease
// for a moment: from the first receipts read once it is armed until the test takes the
// lease again.
type leaseDropper struct {
	services.ReceiptSource
	armed atomic.Bool
	drop  func()
}

func (d *leaseDropper) TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]services.ReceiptResult, error) {
	results, err := d.ReceiptSource.TransactionReceipts(ctx, hashes)
	if d.armed.CompareAndSwap(true, false) {
		d.drop()
	}
	return results, err
}

func (d *leaseDropper) BlockReceipts(ctx context.Context, numbers []uint64) ([][]services.Receipt, error) {
	blocks, err := d.ReceiptSource.BlockReceipts(ctx, numbers)
	if d.armed.CompareAndSwap(true, false) {
		d.drop()
	}
	return blocks, err
}

// Receipts found while the signer's lease is not trusted for a moment (an expiry just ahead
// of its renewal) are not written, and stay scheduled: at the next pass, with the lease
// trusted again under the same token, they are looked up again and recorded. The held
// leases are then the same as when the schedule was last read, so nothing else makes it
// read them again before its backstop.
func TestReceiptsFoundWhileTheLeaseIsNotTrustedAreLookedUpAgain(t *testing.T) {
	t.Parallel()
	eachLookUp(t, func(t *testing.T, s *stage, blockScan int) {
		dropper := &leaseDropper{ReceiptSource: s.chain}
		dropper.drop = func() { s.node.Leases.Fenced(ctx(t), s.lease, "a test's moment without the lease") }
		tracker := receipts.New(receipts.Config{Confirmations: 20}, s.store, dropper, s.node.Leases, telemetry.Noop(), s.logger)
		schedule := s.newSchedule(tracker, blockScan)
		s.pass(schedule)
		head := s.mine(1)
		dropper.armed.Store(true)
		s.pass(schedule) // finds them; the lease is not trusted when they are to be written
		for _, row := range s.rows() {
			if row.subState == "MINED" {
				t.Fatalf("row %+v written without a trusted lease", row)
			}
		}
		again, err := s.node.Leases.Acquire(ctx(t), s.lease.Signer)
		if err != nil || again.Token != s.lease.Token {
			t.Fatalf("the lease taken again: %+v, %v; want token %d", again, err, s.lease.Token)
		}
		s.pass(schedule)
		s.wantMinedIn(head)
	})
}
