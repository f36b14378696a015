package submitting

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// A pass signs and stores every ALLOCATED row of the signer, a batch at a time, and reads
// the rows only as often as it needs: a batch shorter than the limit was all there was,
// so no read that finds nothing follows it.
func TestPassReadsAllocatedRowsOnlyWhileBatchesAreFull(t *testing.T) {
	tests := []struct {
		name      string
		allocated int
		wantReads int
	}{
		{"nothing allocated", 0, 1},
		{"less than a batch", 3, 1},
		{"two batches and a part", 10, 3},
		{"exactly two batches: signed up to the cursor read before, no third read", 8, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, store, lease := newPassSubmitter(t, tt.allocated)
			total, err := s.SubmitAllocated(t.Context(), lease, nil)
			if err != nil || total != tt.allocated {
				t.Fatalf("SubmitAllocated: %d signed, %v; want %d", total, err, tt.allocated)
			}
			if store.reads != tt.wantReads {
				t.Errorf("%d rows read in %d lists, want %d", tt.allocated, store.reads, tt.wantReads)
			}
			if left := store.allocated(); len(left) != 0 {
				t.Errorf("nonces %v still ALLOCATED after the pass", left)
			}
		})
	}
}

// A pass after one that signed everything reads nothing until this node announces an
// allocation (the submit loop is woken by every writer commit, most of which allocated for
// other signers); then it reads and signs the new rows.
func TestPassReadsOnlyAfterAnAllocation(t *testing.T) {
	s, store, lease := newPassSubmitter(t, 3)
	pass := func(wantSigned, wantReads int) {
		t.Helper()
		store.reads = 0
		total, err := s.SubmitAllocated(t.Context(), lease, nil)
		if err != nil || total != wantSigned || store.reads != wantReads {
			t.Fatalf("pass: %d signed in %d reads, %v; want %d in %d", total, store.reads, err, wantSigned, wantReads)
		}
	}
	pass(3, 1) // the first scan: from nonce 0, all three
	pass(0, 0) // nothing allocated since
	store.add(lease, 2)
	pass(0, 0) // allocated, but not announced yet: the announcement wakes the loop
	s.Allocated(lease, 5)
	pass(2, 1)
	pass(0, 0)
	s.Allocated(domain.Lease{Signer: lease.Signer, Token: lease.Token - 1}, 9) // a stale epoch's notice
	pass(0, 0)
}

// A key source that refuses some calls and serves others (throttled near its quota) still
// signs: a pass that stored signatures leaves the signer serving. One that fails at its
// first signature marks it failing, and while it fails a pass asks one signature of it, not
// a batch's worth at once.
func TestSigningPassesWhileTheKeySourceFails(t *testing.T) {
	tests := []struct {
		name string
		// fails answers whether the n-th signature (from 1) is refused.
		fails func(n int) bool
		// wantFailing after the first pass; wantCalls is the second pass's signatures.
		wantFailing bool
		wantCalls   int
	}{
		{"refused at the third signature, after two", func(n int) bool { return n == 3 }, false, 2*passBatch - 2},
		{"refused every time", func(int) bool { return true }, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int64
			health := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 100, MaxDuration: time.Nanosecond}, &healthRecords{}, services.SystemClock{},
				log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelFatal)))
			s, store, lease := newPassSubmitterWith(t, 2*passBatch, health, func(sign func() error) error {
				if tt.fails(int(calls.Add(1))) {
					time.Sleep(20 * time.Millisecond) // a refusal takes a round trip: others start meanwhile
					return errors.New("kms: ThrottlingException: rate exceeded")
				}
				return sign()
			})
			if _, err := s.SubmitAllocated(t.Context(), lease, nil); err == nil {
				t.Fatal("the first pass: no error from the refused signature")
			}
			if got := health.Failing(lease); got != tt.wantFailing {
				t.Fatalf("after the first pass (%d signatures, %d left unsigned): failing %v, want %v", calls.Load(), len(store.allocated()), got, tt.wantFailing)
			}
			before := calls.Load()
			_, _ = s.SubmitAllocated(t.Context(), lease, nil)
			if got := calls.Load() - before; got != int64(tt.wantCalls) {
				t.Fatalf("the second pass asked %d signatures, want %d", got, tt.wantCalls)
			}
		})
	}
}

// grantingLeases grants every lease asked for, at token 1.
type grantingLeases struct{ services.LeaseStore }

func (grantingLeases) AcquireOrRenew(_ context.Context, signer, node string, duration, _ time.Duration) (services.LeaseGrant, error) {
	now := time.Now()
	return services.LeaseGrant{Signer: signer, Owner: node, Token: 1, ExpiresAt: now.Add(duration), DBNow: now, Acquired: true}, nil
}

// healthRecords takes what signing health records (the unit tests' stand-in for the
// signing repository; nothing is waiting by its count).
type healthRecords struct{}

func (healthRecords) RecordSigningHealth(context.Context, domain.Lease, *time.Time, string) (bool, error) {
	return false, nil
}
func (healthRecords) UnsignedBacklog(context.Context, string) (int, error)     { return 1, nil }
func (healthRecords) AppendEvent(context.Context, services.ServiceEvent) error { return nil }

const passBatch = 4

func newPassSubmitter(t *testing.T, allocated int) (*Submitter, *allocatedRows, domain.Lease) {
	t.Helper()
	return newPassSubmitterWith(t, allocated, nil, func(sign func() error) error { return sign() })
}

// newPassSubmitterWith is newPassSubmitter with signing health and a key source whose every
// signature goes through around (which may refuse it instead).
func newPassSubmitterWith(t *testing.T, allocated int, health *services.SigningHealth, around func(sign func() error) error) (*Submitter, *allocatedRows, domain.Lease) {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	chainID := services.ChainID{Int: big.NewInt(1337)}
	from := crypto.PubkeyToAddress(key.PublicKey)
	store := &allocatedRows{}
	for nonce := range allocated {
		store.rows = append(store.rows, domain.ManagedTx{ID: uuid.New(), Signer: from, Nonce: uint64(nonce), State: domain.StateAllocated,
			Intent: domain.Intent{To: &from, Value: big.NewInt(1)}, EffectiveGasLimit: 21_000})
	}
	signer := pipeline.NewSigner(chainID, signerFunc(func(tx *types.Transaction) (*types.Transaction, error) {
		var signed *types.Transaction
		err := around(func() (err error) {
			signed, err = types.SignTx(tx, types.LatestSignerForChainID(chainID.Int), key)
			return err
		})
		return signed, err
	}))
	logger := log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a", Duration: time.Minute}, grantingLeases{}, services.SystemClock{}, telemetry.Noop(), logger)
	node := acceptingNode{}
	s := New(Config{Batch: passBatch, SignConcurrency: 2, ResubmitInterval: time.Minute}, store, node, signer,
		pipeline.NewBroadcaster(node, ignoredOutcomes{}, leases, telemetry.Noop(), logger), leases, oneServer{}, health, telemetry.Noop(), logger)
	lease, err := leases.Acquire(t.Context(), from.Hex())
	if err != nil {
		t.Fatal(err)
	}
	return s, store, lease
}

// allocatedRows is a signer's rows in memory: the store's reads and the signing write.
type allocatedRows struct {
	Store
	rows  []domain.ManagedTx
	reads int
}

func (r *allocatedRows) ListAllocated(_ context.Context, _ string, from uint64, limit int) ([]AllocatedTx, error) {
	r.reads++
	var out []AllocatedTx
	for _, tx := range r.rows {
		if tx.State == domain.StateAllocated && tx.Nonce >= from && len(out) < limit {
			out = append(out, AllocatedTx{ID: tx.ID, Signer: tx.Signer, Nonce: tx.Nonce, Intent: tx.Intent, EffectiveGasLimit: tx.EffectiveGasLimit})
		}
	}
	return out, nil
}

// add allocates n more rows above the last.
func (r *allocatedRows) add(lease domain.Lease, n int) {
	signer := r.rows[0].Signer
	for range n {
		r.rows = append(r.rows, domain.ManagedTx{ID: uuid.New(), Signer: signer, Nonce: uint64(len(r.rows)), State: domain.StateAllocated,
			Intent: domain.Intent{To: &signer, Value: big.NewInt(1)}, EffectiveGasLimit: 21_000, FencingToken: lease.Token})
	}
}

func (r *allocatedRows) AllocationCursor(context.Context, string) (uint64, error) {
	return uint64(len(r.rows)), nil
}

func (r *allocatedRows) MarkSigned(_ context.Context, _ domain.Lease, attempts []pipeline.SignedAttempt, _ time.Duration) ([]uuid.UUID, error) {
	var signed []uuid.UUID
	for _, a := range attempts {
		i := slices.IndexFunc(r.rows, func(tx domain.ManagedTx) bool { return tx.ID == a.TxID })
		r.rows[i].State = domain.StateTracking
		signed = append(signed, a.TxID)
	}
	return signed, nil
}

func (r *allocatedRows) allocated() []uint64 {
	var nonces []uint64
	for _, tx := range r.rows {
		if tx.State == domain.StateAllocated {
			nonces = append(nonces, tx.Nonce)
		}
	}
	return nonces
}

// acceptingNode suggests fixed fees and accepts every transaction sent.
type acceptingNode struct{ services.Chain }

func (acceptingNode) SuggestFees(context.Context) (services.FeeSuggestion, error) {
	return services.FeeSuggestion{BaseFee: big.NewInt(10), TipCap: big.NewInt(1)}, nil
}

func (acceptingNode) SendRawTransactions(_ context.Context, raws [][]byte) ([]error, error) {
	return make([]error, len(raws)), nil
}

// ignoredOutcomes takes the broadcast outcomes a first send writes (none when accepted).
type ignoredOutcomes struct{ pipeline.AttemptStore }

func (ignoredOutcomes) RecordBroadcasts(context.Context, domain.Lease, []pipeline.BroadcastOutcome) error {
	return nil
}

type oneServer struct{}

func (oneServer) ServerEpoch() uint64 { return 1 }
