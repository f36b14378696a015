package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

var errKeyDenied = errors.New("key denied")

// slowKey signs with a real key after a delay, refuses the nonces in fail, and records how
// many signatures were in flight at most and which nonces it was asked for.
type slowKey struct {
	delay time.Duration
	fail  map[uint64]bool
	pace  int // MaxInFlight's answer

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	asked       map[uint64]bool
}

func (k *slowKey) SignTx(_ context.Context, _ common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	k.mu.Lock()
	k.inFlight++
	k.maxInFlight = max(k.maxInFlight, k.inFlight)
	k.asked[tx.Nonce()] = true
	k.mu.Unlock()
	defer func() { k.mu.Lock(); k.inFlight--; k.mu.Unlock() }()
	time.Sleep(k.delay)
	if k.fail[tx.Nonce()] {
		return nil, errKeyDenied
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		return nil, err
	}
	return types.SignTx(tx, types.LatestSignerForChainID(chainID), key)
}

func (k *slowKey) MaxInFlight(common.Address) int { return k.pace }

func batchOf(n int) []pipeline.ToSign {
	to := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	batch := make([]pipeline.ToSign, n)
	for i := range batch {
		batch[i] = pipeline.ToSign{TxID: uuid.New(), Kind: pipeline.AttemptOriginal, Unsigned: pipeline.Unsigned{
			Nonce: uint64(i), To: &to, Value: big.NewInt(1), Gas: 21_000, MaxFee: big.NewInt(2e9), MaxTip: big.NewInt(1e9),
		}}
	}
	return batch
}

func TestSignInOrderSignsConcurrentlyAndStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		size        int
		concurrency int
		pace        int
		fail        []uint64
		wantSigned  int
		// wantParallel: more than one signature was in flight at some point.
		wantParallel bool
	}{
		{name: "all sign, bounded", size: 40, concurrency: 8, wantSigned: 40, wantParallel: true},
		{name: "one at a time", size: 5, concurrency: 1, wantSigned: 5},
		{name: "zero concurrency means one", size: 5, concurrency: 0, wantSigned: 5},
		{name: "failure holds back what follows", size: 40, concurrency: 8, fail: []uint64{13}, wantSigned: 13, wantParallel: true},
		{name: "the lowest failure counts", size: 40, concurrency: 8, fail: []uint64{30, 7}, wantSigned: 7, wantParallel: true},
		{name: "first fails, nothing signed", size: 10, concurrency: 4, fail: []uint64{0}, wantSigned: 0},
		{name: "last fails", size: 10, concurrency: 4, fail: []uint64{9}, wantSigned: 9, wantParallel: true},
		{name: "empty batch", size: 0, concurrency: 4, wantSigned: 0},
		{name: "a source that signs one at a time gets one", size: 10, concurrency: 8, pace: 1, wantSigned: 10},
		{name: "a source's limit below the bound", size: 20, concurrency: 8, pace: 3, wantSigned: 20, wantParallel: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			key := &slowKey{delay: 5 * time.Millisecond, fail: map[uint64]bool{}, asked: map[uint64]bool{}, pace: tc.pace}
			for _, n := range tc.fail {
				key.fail[n] = true
			}
			signer := pipeline.NewSigner(services.ChainID{Int: big.NewInt(1337)}, key)
			batch := batchOf(tc.size)
			attempts, err := signer.SignInOrder(context.Background(), batch, tc.concurrency)

			if len(attempts) != tc.wantSigned {
				t.Fatalf("%d attempts returned, want %d", len(attempts), tc.wantSigned)
			}
			for i, a := range attempts {
				if a.Nonce != uint64(i) || a.TxID != batch[i].TxID || len(a.Raw) == 0 {
					t.Fatalf("attempt %d is nonce %d tx %s (raw %d bytes); want nonce %d tx %s, signed", i, a.Nonce, a.TxID, len(a.Raw), i, batch[i].TxID)
				}
			}
			if tc.wantSigned < tc.size {
				if !errors.Is(err, errKeyDenied) {
					t.Fatalf("error %v, want the signer's refusal", err)
				}
				if want := "(nonce " + strconv.Itoa(tc.wantSigned) + ")"; !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not name the failed nonce %s", err, want)
				}
				// Past the failure only signatures started while it was under way may have
				// been asked for (about one more per worker): the rest of the batch is not.
				if asked, bound := countAbove(key.asked, uint64(tc.wantSigned)), 2*max(tc.concurrency, 1); asked > bound {
					t.Fatalf("%d signatures asked for above the failed nonce, want at most %d", asked, bound)
				}
			} else if err != nil {
				t.Fatalf("error %v with every signature given", err)
			}
			if key.maxInFlight > max(tc.concurrency, 1) {
				t.Fatalf("%d signatures in flight, bound %d", key.maxInFlight, tc.concurrency)
			}
			if tc.pace > 0 && key.maxInFlight > tc.pace {
				t.Fatalf("%d signatures in flight, the source takes %d", key.maxInFlight, tc.pace)
			}
			if tc.wantParallel && key.maxInFlight < 2 {
				t.Fatalf("at most %d signature in flight: not concurrent", key.maxInFlight)
			}
		})
	}
}

func countAbove(asked map[uint64]bool, nonce uint64) int {
	n := 0
	for a := range asked {
		if a > nonce {
			n++
		}
	}
	return n
}

// refusingKey fails every signature with err.
type refusingKey struct{ err error }

func (k refusingKey) SignTx(context.Context, common.Address, *types.Transaction, *big.Int) (*types.Transaction, error) {
	return nil, k.err
}

// A key source's error goes on to logs, API answers and the signer's recorded condition:
// it leaves the signer cleaned of what could be a credential, and its cause can still be
// told by errors.Is and errors.As.
func TestSigningErrorsLeaveCleaned(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("5e", 32)
	tests := []struct {
		name   string
		err    error
		secret []string
		keep   string
	}{
		{"a remote signer's URL with credentials", &url.Error{Op: "Post", URL: "https://ops:hunter2@clef.internal:8550/?token=abc", Err: errKeyDenied},
			[]string{"hunter2", "ops:", "token=abc"}, "clef.internal:8550"},
		{"key material in the text", fmt.Errorf("cannot load 0x%s: %w", key, errKeyDenied), []string{key}, "cannot load"},
		{"a credential parameter", fmt.Errorf("kms said: passphrase=open-sesame: %w", errKeyDenied), []string{"open-sesame"}, "kms said"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			signer := pipeline.NewSigner(services.ChainID{Int: big.NewInt(1337)}, refusingKey{err: tc.err})
			_, one := signer.Sign(context.Background(), uuid.New(), pipeline.AttemptOriginal, batchOf(1)[0].Unsigned)
			_, many := signer.SignInOrder(context.Background(), batchOf(3), 2)
			for _, err := range []error{one, many} {
				if !errors.Is(err, errKeyDenied) {
					t.Fatalf("error %v does not lead to the key source's own", err)
				}
				for _, s := range tc.secret {
					if strings.Contains(err.Error(), s) || strings.Contains(fmt.Sprintf("%v", err), s) {
						t.Errorf("error %q shows %q", err, s)
					}
				}
				if !strings.Contains(err.Error(), tc.keep) {
					t.Errorf("error %q lost %q, which locates the fault", err, tc.keep)
				}
			}
			var urlErr *url.Error
			if errors.As(tc.err, &urlErr) && !errors.As(one, &urlErr) {
				t.Errorf("error %v: errors.As no longer finds the *url.Error", one)
			}
		})
	}
}
