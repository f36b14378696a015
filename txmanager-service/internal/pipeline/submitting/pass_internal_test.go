package submitting

import (
	"context"
	"math/big"
	"slices"
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

const passBatch = 4

func newPassSubmitter(t *testing.T, allocated int) (*Submitter, *allocatedRows, domain.Lease) {
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
		return types.SignTx(tx, types.LatestSignerForChainID(chainID.Int), key)
	}))
	logger := log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a"}, nil, services.SystemClock{}, telemetry.Noop(), logger)
	node := acceptingNode{}
	s := New(Config{Batch: passBatch, SignConcurrency: 2, ResubmitInterval: time.Minute}, store, node, signer,
		pipeline.NewBroadcaster(node, ignoredOutcomes{}, leases, telemetry.Noop(), logger), leases, oneServer{}, nil, telemetry.Noop(), logger)
	lease := domain.Lease{Signer: from.Hex(), Owner: "node-a", Token: 1, ExpiresAt: time.Now().Add(time.Minute), ValidUntil: time.Now().Add(time.Minute)}
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
