package signer

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"hash/crc32"
	"time"

	kms "cloud.google.com/go/kms/apiv1"
	"cloud.google.com/go/kms/apiv1/kmspb"
	"github.com/googleapis/gax-go/v2"
	"google.golang.org/api/option"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// ErrKMSChecksum: a Cloud KMS request or answer was damaged in transit (a CRC32C did not
// match, or KMS did not confirm it received the digest intact).
var ErrKMSChecksum = errors.New("KMS checksum mismatch")

// GCPKMSSource signs with EC_SIGN_SECP256K1_SHA256 keys held in Google Cloud KMS
// (AsymmetricSign with the Keccak-256 signing hash passed as the digest). Every request
// and answer is checked with the CRC32C checksums the API carries, as Google advises:
// the client library does not check them itself.
type GCPKMSSource struct {
	kmsSource
}

// NewGCPKMSSource reads the public key of every configured crypto key version to learn its
// address; a version that is missing, not EC_SIGN_SECP256K1_SHA256 or not readable with
// the process's credentials fails construction, naming it. ctx bounds these look-ups.
// Credentials are Application Default Credentials unless cfg.Plaintext (an emulator);
// clientOptions add to them. The cleanup closes the connection.
func NewGCPKMSSource(ctx context.Context, cfg conf.GCPKMSSource, clientOptions ...option.ClientOption) (*GCPKMSSource, func(), error) {
	var opts []option.ClientOption
	if cfg.Endpoint != "" {
		opts = append(opts, option.WithEndpoint(cfg.Endpoint))
	}
	if cfg.Plaintext {
		opts = append(opts, option.WithoutAuthentication(), option.WithGRPCDialOption(grpc.WithTransportCredentials(insecure.NewCredentials())))
	}
	client, err := kms.NewKeyManagementClient(ctx, append(opts, clientOptions...)...)
	if err != nil {
		return nil, nil, fmt.Errorf("gcp kms: client: %w", err)
	}
	closeClient := func() { _ = client.Close() } // a close error leaves nothing to do
	timeout, attempts := kmsBounds(cfg.Timeout, cfg.MaxAttempts)
	// The library's defaults retry Unavailable and DeadlineExceeded for up to 60 s; ours
	// also retry quota exhaustion (Cloud KMS's throttling), a bounded number of times, and
	// leave the deadline to the call's context.
	retrying := gax.WithRetry(func() gax.Retryer { return &gcpRetryer{left: attempts - 1} })
	client.CallOptions.GetPublicKey = []gax.CallOption{retrying}
	client.CallOptions.AsymmetricSign = []gax.CallOption{retrying}
	keyOf, addrs, err := resolveKMSKeys(ctx, "gcp kms", "signers.gcpKms.keys", cfg.Keys, timeout, func(ctx context.Context, keyID string) ([]byte, error) {
		return gcpPublicKeyDER(ctx, client, keyID)
	})
	if err != nil {
		closeClient()
		return nil, nil, err
	}
	s := &GCPKMSSource{kmsSource{
		name: "gcp kms", keyOf: keyOf, addrs: addrs, timeout: timeout,
		signDigest: func(ctx context.Context, keyID string, digest []byte) ([]byte, error) {
			return gcpSignDigest(ctx, client, keyID, digest)
		},
	}}
	return s, closeClient, nil
}

// gcpPublicKeyDER reads a crypto key version's public key and returns its DER
// SubjectPublicKeyInfo, after checking the algorithm and the PEM's checksum.
func gcpPublicKeyDER(ctx context.Context, client *kms.KeyManagementClient, keyID string) ([]byte, error) {
	pub, err := client.GetPublicKey(ctx, &kmspb.GetPublicKeyRequest{Name: keyID})
	if err != nil {
		return nil, err
	}
	if pub.GetName() != keyID {
		return nil, fmt.Errorf("%w: asked for %s, answered for %q", ErrKMSChecksum, keyID, pub.GetName())
	}
	if !crc32cMatches([]byte(pub.GetPem()), pub.GetPemCrc32C()) {
		return nil, fmt.Errorf("%w: public key PEM", ErrKMSChecksum)
	}
	if alg := pub.GetAlgorithm(); alg != kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256 {
		return nil, fmt.Errorf("%w: algorithm is %s, not %s", ErrNotSecp256k1, alg, kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256)
	}
	block, _ := pem.Decode([]byte(pub.GetPem()))
	if block == nil || block.Type != "PUBLIC KEY" {
		return nil, errors.New("public key is not a PEM PUBLIC KEY block")
	}
	return block.Bytes, nil
}

// gcpSignDigest has a crypto key version sign digest and returns the DER signature once
// both directions' checksums agree.
func gcpSignDigest(ctx context.Context, client *kms.KeyManagementClient, keyID string, digest []byte) ([]byte, error) {
	resp, err := client.AsymmetricSign(ctx, &kmspb.AsymmetricSignRequest{
		Name:         keyID,
		Digest:       &kmspb.Digest{Digest: &kmspb.Digest_Sha256{Sha256: digest}},
		DigestCrc32C: wrapperspb.Int64(int64(crc32c(digest))),
	})
	if err != nil {
		return nil, err
	}
	switch {
	case resp.GetName() != keyID:
		return nil, fmt.Errorf("%w: asked %s to sign, answered for %q", ErrKMSChecksum, keyID, resp.GetName())
	case !resp.GetVerifiedDigestCrc32C():
		return nil, fmt.Errorf("%w: KMS did not verify the digest's checksum", ErrKMSChecksum)
	case !crc32cMatches(resp.GetSignature(), resp.GetSignatureCrc32C()):
		return nil, fmt.Errorf("%w: signature", ErrKMSChecksum)
	}
	return resp.GetSignature(), nil
}

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32cTable) }

// crc32cMatches: the checksum is present and is b's.
func crc32cMatches(b []byte, sum *wrapperspb.Int64Value) bool {
	return sum != nil && sum.GetValue() == int64(crc32c(b))
}

// gcpRetryer retries a Cloud KMS call that failed with a code worth another try, at most
// left more times, waiting kmsBackoff.
type gcpRetryer struct {
	left, done int
}

// gcpRetryableCodes: quota exhausted (throttling) and the transient failures.
var gcpRetryableCodes = map[codes.Code]bool{codes.ResourceExhausted: true, codes.Unavailable: true, codes.DeadlineExceeded: true}

func (r *gcpRetryer) Retry(err error) (time.Duration, bool) {
	if r.left <= 0 || !gcpRetryableCodes[status.Code(err)] {
		return 0, false
	}
	r.left--
	r.done++
	return kmsBackoff(r.done), true
}
