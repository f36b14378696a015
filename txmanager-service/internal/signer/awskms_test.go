package signer_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/test/localkms"
)

// startLocalKMS runs the AWS KMS emulator (`make test-binaries` built it) with a fault front
// before it; both stop when t ends.
func startLocalKMS(t *testing.T) (*localkms.Server, *localkms.Front) {
	t.Helper()
	bin, err := localkms.FindInRepo()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	kms, err := localkms.Start(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kms.Stop)
	front, err := localkms.StartFront(kms.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(front.Close)
	return kms, front
}

// newAWSKMSSource builds the source against endpoint with the emulator's credentials.
func newAWSKMSSource(ctx context.Context, endpoint string, keys []conf.KMSKey, timeout time.Duration, attempts int) (*signer.AWSKMSSource, error) {
	cfg := conf.AWSKMSSource{Region: localkms.Region, Endpoint: endpoint, Keys: keys, Timeout: conf.Duration(timeout), MaxAttempts: attempts}
	return signer.NewAWSKMSSource(ctx, cfg, awsconfig.WithCredentialsProvider(localkms.Credentials()))
}

func createKMSKey(t *testing.T, kms *localkms.Server) (string, common.Address) {
	t.Helper()
	id, addr, err := kms.CreateKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id, addr
}

// Keys named by id and by alias sign every kind of transaction the service makes, from
// many goroutines at once, through the real SDK and a real KMS emulator.
func TestAWSKMSSourceSigns(t *testing.T) {
	t.Parallel()
	kms, _ := startLocalKMS(t)
	first, firstAddr := createKMSKey(t, kms)
	second, secondAddr := createKMSKey(t, kms)
	if err := kms.CreateAlias(context.Background(), "alias/txm-hot", second); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, err := newAWSKMSSource(ctx, kms.URL(), []conf.KMSKey{{ID: first}, {ID: "alias/txm-hot", Address: secondAddr.Hex()}}, 5*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := src.Addresses(), []common.Address{firstAddr, secondAddr}; !sameAddresses(got, want) {
		t.Fatalf("Addresses() = %v, want %v", got, want)
	}
	requireSignsConcurrently(t, src, []common.Address{firstAddr, secondAddr}, 40)
	if _, err := src.SignTx(ctx, addressOf(newKey(t)), dynamicFeeTx(0), testChainID); !errors.Is(err, domain.ErrUnknownSigner) {
		t.Fatalf("signing for an address the source lacks: %v, want ErrUnknownSigner", err)
	}
}

// A key that is missing, of the wrong kind or another account's fails construction with
// an error naming the key and the configuration entry.
func TestAWSKMSSourceRefusesBadKeys(t *testing.T) {
	t.Parallel()
	kms, _ := startLocalKMS(t)
	good, goodAddr := createKMSKey(t, kms)
	p256, err := kms.CreateKeyOfSpec(context.Background(), kmstypes.KeySpecEccNistP256)
	if err != nil {
		t.Fatal(err)
	}
	other := addressOf(newKey(t))
	tests := []struct {
		name    string
		keys    []conf.KMSKey
		wantErr error
		want    []string
	}{
		{name: "missing key", keys: []conf.KMSKey{{ID: good}, {ID: "alias/no-such-key"}},
			want: []string{"aws kms: key alias/no-such-key (signers.awsKms.keys[1]): get public key", "NotFoundException"}},
		{name: "P-256 key", keys: []conf.KMSKey{{ID: p256}}, wantErr: signer.ErrNotSecp256k1,
			want: []string{"aws kms: key " + p256 + " (signers.awsKms.keys[0])", "key spec is ECC_NIST_P256, not ECC_SECG_P256K1"}},
		{name: "another account's key", keys: []conf.KMSKey{{ID: good, Address: other.Hex()}},
			want: []string{"aws kms: key " + good + " holds signer " + goodAddr.Hex() + ", but signers.awsKms.keys[0].address says " + other.Hex()}},
		{name: "one key twice", keys: []conf.KMSKey{{ID: good}, {ID: "arn:aws:kms:" + localkms.Region + ":111122223333:key/" + good}},
			want: []string{"both hold signer " + goodAddr.Hex()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := newAWSKMSSource(ctx, kms.URL(), tt.keys, 5*time.Second, 1)
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("got %v, want an error (%v)", err, tt.wantErr)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// What a signature meets after startup: throttling, a hang, and the key disabled (KMS
// refuses it).
func TestAWSKMSSourceAtSignTime(t *testing.T) {
	t.Parallel()
	kms, front := startLocalKMS(t)
	id, addr := createKMSKey(t, kms)
	const attempts = 3
	src, err := newAWSKMSSource(context.Background(), front.URL(), []conf.KMSKey{{ID: id}}, kmsTestDeadline, attempts)
	if err != nil {
		t.Fatal(err)
	}
	requireKMSFaultsHandled(t, src, addr, front, attempts, "aws kms: sign for "+addr.Hex(), "ThrottlingException")
	t.Run("key disabled", func(t *testing.T) {
		if err := kms.DisableKey(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		_, err := src.SignTx(context.Background(), addr, dynamicFeeTx(1), testChainID)
		if err == nil || !strings.Contains(err.Error(), "aws kms: sign for "+addr.Hex()+" with key "+id) || !strings.Contains(err.Error(), "DisabledException") {
			t.Fatalf("got %v, want a DisabledException naming the signer and the key", err)
		}
	})
}

// kmsTestDeadline is the per-call deadline of the sources in the fault tests.
const kmsTestDeadline = 800 * time.Millisecond

// kmsFaults is what the fronts of both KMSes (test/localkms.Front, test/gcpkms.Server) do
// to signing calls.
type kmsFaults interface {
	Throttle(n int)
	SignCalls() int64
	Hang()
	Release()
}

// requireKMSFaultsHandled runs, in order, the faults both KMS sources must handle the same
// way: throttling that passes is retried, throttling that lasts fails after attempts
// tries with the KMS's throttling error (throttleCode), and a KMS that stops answering
// costs the per-call deadline, not a stall. Every error starts with wantPrefix (the source
// and the signer).
func requireKMSFaultsHandled(t *testing.T, src signer.Source, from common.Address, faults kmsFaults, attempts int, wantPrefix, throttleCode string) {
	t.Helper()
	sign := func() error {
		_, err := src.SignTx(context.Background(), from, dynamicFeeTx(1), testChainID)
		return err
	}
	t.Run("throttled, then signed", func(t *testing.T) {
		before := faults.SignCalls()
		faults.Throttle(attempts - 1)
		if err := sign(); err != nil {
			t.Fatalf("throttled %d times with %d attempts: %v", attempts-1, attempts, err)
		}
		if n := faults.SignCalls() - before; n != int64(attempts) {
			t.Fatalf("%d signing calls, want %d", n, attempts)
		}
	})
	t.Run("throttled throughout", func(t *testing.T) {
		before := faults.SignCalls()
		faults.Throttle(100)
		defer faults.Throttle(0)
		err := sign()
		if err == nil || !strings.HasPrefix(err.Error(), wantPrefix) || !strings.Contains(err.Error(), throttleCode) {
			t.Fatalf("got %v, want %s after %q", err, throttleCode, wantPrefix)
		}
		if n := faults.SignCalls() - before; n != int64(attempts) {
			t.Fatalf("%d signing calls, want %d (maxAttempts)", n, attempts)
		}
	})
	t.Run("KMS stops answering", func(t *testing.T) {
		faults.Hang()
		defer faults.Release()
		started := time.Now()
		err := sign()
		if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), wantPrefix) {
			t.Fatalf("got %v, want the deadline after %q", err, wantPrefix)
		}
		if waited := time.Since(started); waited > 10*time.Second {
			t.Fatalf("returned after %s; the deadline is %s", waited, kmsTestDeadline)
		}
	})
}

// A throttle that lasts is retried up to maxAttempts on every signature, however many came
// before: the SDK's client-side retry quota, shared by the client's signers, would run dry
// after about a hundred retries and then retry nothing.
func TestAWSKMSRetriesDoNotRunDryUnderALastingThrottle(t *testing.T) {
	t.Parallel()
	kms, front := startLocalKMS(t)
	id, addr := createKMSKey(t, kms)
	const attempts, signatures, workers = 3, 64, 8
	src, err := newAWSKMSSource(context.Background(), front.URL(), []conf.KMSKey{{ID: id}}, 10*time.Second, attempts)
	if err != nil {
		t.Fatal(err)
	}
	front.Throttle(1 << 20)
	defer front.Throttle(0)
	before := front.SignCalls()
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range signatures / workers {
				if _, err := src.SignTx(context.Background(), addr, dynamicFeeTx(1), testChainID); err == nil {
					t.Error("signed while the KMS throttles every call")
				}
			}
		})
	}
	wg.Wait()
	if n := front.SignCalls() - before; n != signatures*attempts {
		t.Fatalf("%d signing calls for %d signatures, want %d (maxAttempts each)", n, signatures, signatures*attempts)
	}
}
