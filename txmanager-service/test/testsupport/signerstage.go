package testsupport

import (
	"context"
	"crypto/ecdsa"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// SignerStage is one node driving one signer on a database and a simulated chain of its
// own, with the pipeline in front of a stage as production runs it: the writer allocates,
// the submitting stage signs, stores and sends. The chain mines only when the test says.
// The pipeline stages' tests build on it.
type SignerStage struct {
	T      *testing.T
	Pool   *pgxpool.Pool
	Sim    *chain.SimulatedChain
	Key    *ecdsa.PrivateKey
	Signer common.Address
	Node   *WriterNode
	// Lease is the signer's, held for the whole test.
	Lease       domain.Lease
	TxSigner    *pipeline.Signer
	Attempts    *repositories.AttemptRepository
	Broadcaster *pipeline.Broadcaster
	Submitter   *submitting.Submitter
	Logger      log.Logger
}

// SignerStageOptions shape the stage.
type SignerStageOptions struct {
	// DevAccounts funded on the chain (the first is the signer); at least 1.
	DevAccounts int
	// AtGenesis leaves the chain at its genesis block: its node answers receipt look-ups
	// with errors until a block is sealed. Otherwise one block is sealed first, since the
	// node indexes transactions only once the chain has left genesis.
	AtGenesis bool
	// ServeHTTP serves the node's JSON-RPC on a loopback port too (Sim.HTTPEndpoint), for a
	// fault proxy in front of it.
	ServeHTTP bool
}

// NewSignerStage builds the stage.
func NewSignerStage(t *testing.T, opts SignerStageOptions) *SignerStage {
	t.Helper()
	pool := MigratedPool(t)
	simConf := chain.SimulatedConfig{DevAccounts: max(opts.DevAccounts, 1)}
	if opts.ServeHTTP {
		simConf.HTTPAddr = "127.0.0.1:0"
	}
	sim, err := chain.NewSimulated(simConf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	if !opts.AtGenesis {
		sim.Commit()
	}
	key := sim.DevKeys()[0]
	s := &SignerStage{T: t, Pool: pool, Sim: sim, Key: key, Signer: crypto.PubkeyToAddress(key.PublicKey),
		Attempts: repositories.NewAttemptRepository(pool, TestChain()), Logger: QuietLogger()}
	// No lease keeper runs here to renew the lease, so it must outlast the test however
	// slowly a loaded machine runs it under the race detector.
	s.Node = NewWriterNode(t, pool, "node-a", WriterNodeOptions{LeaseDuration: 10 * time.Minute})
	if s.Lease, err = s.Node.Leases.Acquire(t.Context(), s.Signer.Hex()); err != nil {
		t.Fatal(err)
	}
	keys, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, nil, []*ecdsa.PrivateKey{key})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.Noop()
	watch, err := repositories.NewServerWatch(s.Logger, metrics)
	if err != nil {
		t.Fatal(err)
	}
	s.TxSigner = pipeline.NewSigner(TestChain(), keys)
	s.Broadcaster = pipeline.NewBroadcaster(sim, s.Attempts, s.Node.Leases, metrics, s.Logger)
	s.Submitter = submitting.New(submitting.Config{Batch: 64, SignConcurrency: 4, ResubmitInterval: time.Minute},
		repositories.NewSubmittingRepository(pool, TestChain()), sim, s.TxSigner, s.Broadcaster, s.Node.Leases, watch, nil, metrics, s.Logger)
	return s
}

// QuietLogger keeps a component's logs out of the test output unless -v asks for them.
func QuietLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// Allocate runs one writer batch of count self-transfers (values 1, 2, ...) and returns
// the rows it wrote.
func (s *SignerStage) Allocate(count int) []domain.ManagedTx {
	s.T.Helper()
	txs, errs := Results(s.T, s.Node.Allocate(s.T, s.Signer, count))
	for _, err := range errs {
		if err != nil {
			s.T.Fatalf("allocate: %v", err)
		}
	}
	return txs
}

// Submit signs, stores and sends every ALLOCATED row of the signer.
func (s *SignerStage) Submit() {
	s.T.Helper()
	// The submitter reads only above what it signed last unless told to look again: these
	// rows were allocated by a writer that does not announce them to it.
	s.Submitter.Rescan(s.Lease.Signer)
	if _, err := s.Submitter.SubmitAllocated(s.T.Context(), s.Lease, nil); err != nil {
		s.T.Fatalf("submit: %v", err)
	}
}

// WaitPending waits until the node's pending nonce for the signer is want: the pool takes
// a sent transaction in on its own loop, and a block sealed before would miss it.
func (s *SignerStage) WaitPending(want uint64) {
	s.T.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.Sim.PendingNonceAt(s.T.Context(), s.Signer)
		if err != nil {
			s.T.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("pending nonce %d, want %d", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Mine seals n blocks and returns the head.
func (s *SignerStage) Mine(n int) uint64 {
	for range n {
		s.Sim.Commit()
	}
	head, err := s.Sim.Backend().Client().BlockNumber(s.T.Context())
	if err != nil {
		s.T.Fatal(err)
	}
	return head
}

// BoundedContext is a test's context with a bound, so a hung chain call fails the test
// instead of the whole binary.
func BoundedContext(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
