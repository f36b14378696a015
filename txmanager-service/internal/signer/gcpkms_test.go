package signer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/test/gcpkms"
)

// startGCPKMS serves the Cloud KMS API on loopback with real keys (see test/gcpkms for
// what it covers); it stops when t ends.
func startGCPKMS(t *testing.T) *gcpkms.Server {
	t.Helper()
	kms, err := gcpkms.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kms.Close)
	return kms
}

// newGCPKMSSource builds the source through the real Cloud KMS client, reaching the
// stand-in over plaintext gRPC without credentials.
func newGCPKMSSource(t *testing.T, kms *gcpkms.Server, keys []conf.KMSKey, timeout time.Duration, attempts int) (*signer.GCPKMSSource, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	src, cleanup, err := signer.NewGCPKMSSource(ctx, conf.GCPKMSSource{
		Endpoint: kms.Addr(), Plaintext: true, Keys: keys, Timeout: conf.Duration(timeout), MaxAttempts: attempts,
	})
	if err == nil {
		t.Cleanup(cleanup)
	}
	return src, err
}

// Key versions sign every transaction asked for, from many goroutines at once; about half
// the KMS's answers are high-s and every signature that comes out is low-s and recovers
// to its signer.
func TestGCPKMSSourceSigns(t *testing.T) {
	t.Parallel()
	kms := startGCPKMS(t)
	first := kms.AddKey(gcpkms.KeyName("hot-1"), newKey(t))
	second := kms.AddKey(gcpkms.KeyName("hot-2"), newKey(t))
	src, err := newGCPKMSSource(t, kms, []conf.KMSKey{{ID: gcpkms.KeyName("hot-1")}, {ID: gcpkms.KeyName("hot-2"), Address: second.Hex()}}, 5*time.Second, 3)
	if err != nil {
		t.Fatal(err)
	}
	if got := src.Addresses(); !sameAddresses(got, []common.Address{first, second}) {
		t.Fatalf("Addresses() = %v, want %s and %s", got, first.Hex(), second.Hex())
	}
	ctx := context.Background()
	requireSignsConcurrently(t, src, []common.Address{first, second}, 40)
	if kms.HighSAnswers() == 0 {
		t.Fatal("the KMS sent no high-s signature, so normalisation went untested")
	}
	if _, err := src.SignTx(ctx, addressOf(newKey(t)), dynamicFeeTx(0), testChainID); !errors.Is(err, domain.ErrUnknownSigner) {
		t.Fatalf("signing for an address the source lacks: %v, want ErrUnknownSigner", err)
	}
}

// A key version that is missing, not readable, of another algorithm or another account's
// fails construction, naming it.
func TestGCPKMSSourceRefusesBadKeys(t *testing.T) {
	t.Parallel()
	kms := startGCPKMS(t)
	good := kms.AddKey(gcpkms.KeyName("good"), newKey(t))
	kms.AddKey(gcpkms.KeyName("denied"), newKey(t))
	kms.Deny(gcpkms.KeyName("denied"))
	kms.AddP256Key(gcpkms.KeyName("p256"), newKey(t))
	other := addressOf(newKey(t))
	tests := []struct {
		name    string
		keys    []conf.KMSKey
		wantErr error
		want    []string
	}{
		{name: "missing key", keys: []conf.KMSKey{{ID: gcpkms.KeyName("good")}, {ID: gcpkms.KeyName("gone")}},
			want: []string{"gcp kms: key " + gcpkms.KeyName("gone") + " (signers.gcpKms.keys[1]): get public key", "NotFound"}},
		{name: "permission denied", keys: []conf.KMSKey{{ID: gcpkms.KeyName("denied")}},
			want: []string{"gcp kms: key " + gcpkms.KeyName("denied") + " (signers.gcpKms.keys[0])", "PermissionDenied"}},
		{name: "P-256 key", keys: []conf.KMSKey{{ID: gcpkms.KeyName("p256")}}, wantErr: signer.ErrNotSecp256k1,
			want: []string{"algorithm is EC_SIGN_P256_SHA256, not EC_SIGN_SECP256K1_SHA256"}},
		{name: "another account's key", keys: []conf.KMSKey{{ID: gcpkms.KeyName("good"), Address: other.Hex()}},
			want: []string{"holds signer " + good.Hex() + ", but signers.gcpKms.keys[0].address says " + other.Hex()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := newGCPKMSSource(t, kms, tt.keys, 5*time.Second, 1)
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

// After startup: quota exhausted (Cloud KMS's throttling), a hang, an answer damaged in
// transit, and permission withdrawn.
func TestGCPKMSSourceAtSignTime(t *testing.T) {
	t.Parallel()
	kms := startGCPKMS(t)
	name := gcpkms.KeyName("hot")
	addr := kms.AddKey(name, newKey(t))
	const attempts = 3
	src, err := newGCPKMSSource(t, kms, []conf.KMSKey{{ID: name}}, kmsTestDeadline, attempts)
	if err != nil {
		t.Fatal(err)
	}
	requireKMSFaultsHandled(t, src, addr, kms, attempts, "gcp kms: sign for "+addr.Hex(), "ResourceExhausted")
	sign := func() error {
		_, err := src.SignTx(context.Background(), addr, dynamicFeeTx(1), testChainID)
		return err
	}
	t.Run("signature damaged in transit", func(t *testing.T) {
		kms.CorruptSignatures(true)
		defer kms.CorruptSignatures(false)
		if err := sign(); !errors.Is(err, signer.ErrKMSChecksum) {
			t.Fatalf("got %v, want ErrKMSChecksum", err)
		}
	})
	t.Run("permission taken away", func(t *testing.T) {
		kms.Deny(name)
		err := sign()
		if err == nil || !strings.Contains(err.Error(), "gcp kms: sign for "+addr.Hex()+" with key "+name) || !strings.Contains(err.Error(), "PermissionDenied") {
			t.Fatalf("got %v, want PermissionDenied naming the signer and the key", err)
		}
	})
}
