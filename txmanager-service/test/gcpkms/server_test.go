package gcpkms_test

import (
	"context"
	"encoding/asn1"
	"encoding/pem"
	"hash/crc32"
	"math/big"
	"testing"
	"time"

	kms "cloud.google.com/go/kms/apiv1"
	"cloud.google.com/go/kms/apiv1/kmspb"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bionicotaku/txmanager-service/test/gcpkms"
)

func client(t *testing.T, s *gcpkms.Server) *kms.KeyManagementClient {
	t.Helper()
	c, err := kms.NewKeyManagementClient(context.Background(), option.WithEndpoint(s.Addr()), option.WithoutAuthentication(),
		option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The stand-in answers the real client as Cloud KMS would: the key's public key in PEM with
// its checksum, and signatures of the digest that verify under that key, with checksums.
func TestServesTheKMSAPI(t *testing.T) {
	t.Parallel()
	s, err := gcpkms.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	name := gcpkms.KeyName("k")
	s.AddKey(name, key)
	c := client(t, s)
	ctx := context.Background()
	pub, err := c.GetPublicKey(ctx, &kmspb.GetPublicKeyRequest{Name: name})
	if err != nil {
		t.Fatal(err)
	}
	table := crc32.MakeTable(crc32.Castagnoli)
	if pub.GetAlgorithm() != kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256 || pub.GetPemCrc32C().GetValue() != int64(crc32.Checksum([]byte(pub.GetPem()), table)) {
		t.Fatalf("public key answer: %v", pub)
	}
	block, _ := pem.Decode([]byte(pub.GetPem()))
	if block == nil || len(block.Bytes) < 65 {
		t.Fatalf("PEM %q", pub.GetPem())
	}
	if got, err := crypto.UnmarshalPubkey(block.Bytes[len(block.Bytes)-65:]); err != nil || !got.Equal(&key.PublicKey) {
		t.Fatalf("served public key %v (%v) is not the key's", got, err)
	}
	digest := crypto.Keccak256([]byte("txm"))
	for range 4 { // high-s and low-s answers alternate
		resp, err := c.AsymmetricSign(ctx, &kmspb.AsymmetricSignRequest{Name: name, Digest: &kmspb.Digest{Digest: &kmspb.Digest_Sha256{Sha256: digest}},
			DigestCrc32C: wrapperspb.Int64(int64(crc32.Checksum(digest, table)))})
		if err != nil {
			t.Fatal(err)
		}
		if !resp.GetVerifiedDigestCrc32C() || resp.GetSignatureCrc32C().GetValue() != int64(crc32.Checksum(resp.GetSignature(), table)) {
			t.Fatalf("checksums: %v", resp)
		}
		var sig struct{ R, S *big.Int }
		if _, err := asn1.Unmarshal(resp.GetSignature(), &sig); err != nil {
			t.Fatal(err)
		}
		// go-ethereum verifies low-s signatures only; a KMS sends either half.
		if n := crypto.S256().Params().N; sig.S.Cmp(new(big.Int).Rsh(n, 1)) > 0 {
			sig.S.Sub(n, sig.S)
		}
		compact := make([]byte, 64)
		sig.R.FillBytes(compact[:32])
		sig.S.FillBytes(compact[32:])
		if !crypto.VerifySignature(crypto.FromECDSAPub(&key.PublicKey), digest, compact) {
			t.Fatal("the signature does not verify under the key")
		}
	}
	if s.HighSAnswers() == 0 {
		t.Fatal("no high-s answer in four")
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	s, err := gcpkms.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key, _ := crypto.GenerateKey()
	s.AddKey(gcpkms.KeyName("denied"), key)
	s.Deny(gcpkms.KeyName("denied"))
	c := client(t, s)
	sign := func(ctx context.Context, name string) error {
		// No retries: each call reaches the server once.
		noRetry := gax.WithRetry(func() gax.Retryer { return nil })
		_, err := c.AsymmetricSign(ctx, &kmspb.AsymmetricSignRequest{Name: name, Digest: &kmspb.Digest{Digest: &kmspb.Digest_Sha256{Sha256: make([]byte, 32)}}}, noRetry)
		return err
	}
	ctx := context.Background()
	if code := status.Code(sign(ctx, gcpkms.KeyName("absent"))); code != codes.NotFound {
		t.Errorf("absent key: %s, want NotFound", code)
	}
	if code := status.Code(sign(ctx, gcpkms.KeyName("denied"))); code != codes.PermissionDenied {
		t.Errorf("denied key: %s, want PermissionDenied", code)
	}
	s.Throttle(1)
	if code := status.Code(sign(ctx, gcpkms.KeyName("denied"))); code != codes.ResourceExhausted {
		t.Errorf("throttled: %s, want ResourceExhausted", code)
	}
	s.Hang()
	hung, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if code := status.Code(sign(hung, gcpkms.KeyName("absent"))); code != codes.DeadlineExceeded {
		t.Errorf("hung: %s, want DeadlineExceeded", code)
	}
}
