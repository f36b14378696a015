package integration

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/test/gcpkms"
	"github.com/bionicotaku/txmanager-service/test/localkms"
)

// kmsLatency is the per-signature delay of the slow source: a cloud KMS in another zone,
// or one under load, answers in tens of milliseconds.
const kmsLatency = 30 * time.Millisecond

// BenchmarkSigning measures one signer's signing as the submitting stage does it: batches
// of pipeline.submitBatch transactions, signed by pipeline.Signer.SignInOrder with
// pipeline.signConcurrency signatures in flight (the embedded defaults), through each key
// source's production adapter against a real backend: a raw key and a keystore in
// process, AWS KMS (the local-kms emulator through the AWS SDK), Google Cloud KMS (the
// in-repo KMS API server with real secp256k1 keys through the Google client), a real clef,
// and the Google Cloud KMS server again with 30 ms added to every signature. It reports
// signatures per second and each signature's p50 and p99 latency per source.
//
// Run with `make bench`.
func BenchmarkSigning(b *testing.B) {
	defaults, err := conf.Load("")
	if err != nil {
		b.Fatal(err)
	}
	batch, concurrency := defaults.Pipeline.SubmitBatch, defaults.Pipeline.SignConcurrency
	sources := []struct {
		name       string
		signatures int
		start      func(b *testing.B) (signer.Source, common.Address)
	}{
		{"raw-key", 8 * batch, startRawKeySource},
		{"keystore", 8 * batch, startKeystoreSource},
		{"aws-kms-local-kms", 4 * batch, startAWSKMSSource},
		{"gcp-kms-in-repo-server", 8 * batch, startGCPKMSSource(0)},
		{"clef", 2 * batch, startClefSource},
		{fmt.Sprintf("gcp-kms-plus-%s", kmsLatency), 8 * batch, startGCPKMSSource(kmsLatency)},
	}
	for _, src := range sources {
		b.Run(src.name, func(b *testing.B) {
			source, from := src.start(b)
			timed := &timedSource{Source: source}
			s := pipeline.NewSigner(services.ChainID{Int: big.NewInt(chain.SimulatedChainID)}, timed)
			b.ResetTimer()
			var elapsed time.Duration
			for range b.N {
				timed.reset()
				started := time.Now()
				for first := 0; first < src.signatures; first += batch {
					attempts, err := s.SignInOrder(b.Context(), transfersFrom(from, uint64(first), batch), concurrency)
					if err != nil || len(attempts) != batch {
						b.Fatalf("%d of %d signed: %v", len(attempts), batch, err)
					}
				}
				elapsed += time.Since(started)
			}
			perSecond := float64(b.N*src.signatures) / elapsed.Seconds()
			p50, p99 := timed.percentiles()
			b.ReportMetric(perSecond, "signatures/s")
			b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(p99.Microseconds())/1000, "p99-ms")
			inFlight := concurrency
			if limit := timed.MaxInFlight(from); limit > 0 {
				inFlight = min(inFlight, limit)
			}
			b.Logf("%s: %.0f signatures/s, p50 %s, p99 %s (%d signatures in batches of %d, %d in flight)",
				src.name, perSecond, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), b.N*src.signatures, batch, inFlight)
		})
	}
}

// transfersFrom is a batch of n transfers from from, nonces first upwards.
func transfersFrom(from common.Address, first uint64, n int) []pipeline.ToSign {
	to := common.HexToAddress("0x00000000000000000000000000000000000000b0")
	out := make([]pipeline.ToSign, n)
	for i := range out {
		out[i] = pipeline.ToSign{TxID: uuid.New(), Kind: pipeline.AttemptOriginal, Unsigned: pipeline.Unsigned{
			From: from, Nonce: first + uint64(i), To: &to, Value: big.NewInt(1), Gas: 21_000, MaxFee: big.NewInt(2e9), MaxTip: big.NewInt(1e9),
		}}
	}
	return out
}

// timedSource records how long each signature took.
type timedSource struct {
	signer.Source
	mu    sync.Mutex
	times []time.Duration
}

func (s *timedSource) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	started := time.Now()
	signed, err := s.Source.SignTx(ctx, from, tx, chainID)
	took := time.Since(started)
	s.mu.Lock()
	s.times = append(s.times, took)
	s.mu.Unlock()
	return signed, err
}

// MaxInFlight passes on the source's own limit (clef signs one at a time), as the
// registry does in the service.
func (s *timedSource) MaxInFlight(common.Address) int {
	if paced, ok := s.Source.(interface{ MaxInFlight() int }); ok {
		return paced.MaxInFlight()
	}
	return 0
}

func (s *timedSource) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.times = s.times[:0]
}

func (s *timedSource) percentiles() (p50, p99 time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.times) == 0 {
		return 0, 0
	}
	sorted := slices.Clone(s.times)
	slices.Sort(sorted)
	return sorted[len(sorted)/2], sorted[len(sorted)*99/100]
}

func startRawKeySource(b *testing.B) (signer.Source, common.Address) {
	key := newSignerKey(b)
	src, err := signer.NewRawKeySource("development", nil, []*ecdsa.PrivateKey{key})
	if err != nil {
		b.Fatal(err)
	}
	return src, crypto.PubkeyToAddress(key.PublicKey)
}

func startKeystoreSource(b *testing.B) (signer.Source, common.Address) {
	dir := b.TempDir()
	const passphrase = "bench-passphrase"
	account, err := keystore.NewKeyStore(dir, keystore.LightScryptN, keystore.LightScryptP).ImportECDSA(newSignerKey(b), passphrase)
	if err != nil {
		b.Fatal(err)
	}
	b.Setenv("TXM_BENCH_KEYSTORE_PASSPHRASE", passphrase)
	src, stop, err := signer.NewKeystoreSource(conf.KeystoreSource{Dir: dir, PassphraseEnv: "TXM_BENCH_KEYSTORE_PASSPHRASE"})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return src, account.Address
}

func startAWSKMSSource(b *testing.B) (signer.Source, common.Address) {
	server := startLocalKMS(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	keyID, addr, err := server.CreateKey(ctx)
	if err != nil {
		b.Fatal(err)
	}
	src, err := signer.NewAWSKMSSource(ctx, conf.AWSKMSSource{Region: localkms.Region, Endpoint: server.URL(), Timeout: conf.Duration(10 * time.Second),
		MaxAttempts: 3, Keys: []conf.KMSKey{{ID: keyID, Address: addr.Hex()}}})
	if err != nil {
		b.Fatal(err)
	}
	return src, addr
}

func startGCPKMSSource(latency time.Duration) func(b *testing.B) (signer.Source, common.Address) {
	return func(b *testing.B) (signer.Source, common.Address) {
		server, err := gcpkms.Start()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(server.Close)
		server.SetLatency(latency)
		name := gcpkms.KeyName("txm-bench")
		addr := server.AddKey(name, newSignerKey(b))
		src, stop, err := signer.NewGCPKMSSource(context.Background(), conf.GCPKMSSource{Endpoint: server.Addr(), Plaintext: true,
			Timeout: conf.Duration(10 * time.Second), MaxAttempts: 3, Keys: []conf.KMSKey{{ID: name}}})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(stop)
		return src, addr
	}
}

func startClefSource(b *testing.B) (signer.Source, common.Address) {
	c := startClefSigner(b, newSignerKey(b), false)
	src, stop, err := signer.NewExternalSource(context.Background(), c.clef.URL(), []common.Address{c.clefAddr}, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(stop)
	return src, c.clefAddr
}
