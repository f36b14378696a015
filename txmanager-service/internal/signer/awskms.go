package signer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Bounds used when the configuration leaves them unset (the defaults file sets both).
const (
	DefaultKMSTimeout     = 5 * time.Second
	DefaultKMSMaxAttempts = 5
)

// AWSKMSSource signs with ECC_SECG_P256K1 keys held in AWS KMS (Sign with MessageType
// DIGEST and ECDSA_SHA_256: KMS signs the Keccak-256 signing hash as given).
type AWSKMSSource struct {
	kmsSource
}

// NewAWSKMSSource reads the public key of every configured key (which must be
// ECC_SECG_P256K1 and for SIGN_VERIFY) to learn its address; a key that is missing or not
// readable with the process's credentials fails construction, naming it. ctx bounds these
// look-ups. Credentials come from the SDK's default chain; loadOptions add to it (tests
// pass an emulator's static credentials).
func NewAWSKMSSource(ctx context.Context, cfg conf.AWSKMSSource, loadOptions ...func(*awsconfig.LoadOptions) error) (*AWSKMSSource, error) {
	var opts []func(*awsconfig.LoadOptions) error
	if cfg.Region != "" {
		opts = append(opts, awsconfig.WithRegion(cfg.Region))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, append(opts, loadOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("aws kms: load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		return nil, errors.New("aws kms: no region: set signers.awsKms.region or AWS_REGION")
	}
	timeout, attempts := kmsBounds(cfg.Timeout, cfg.MaxAttempts)
	client := kms.NewFromConfig(awsCfg, func(o *kms.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		// The standard retryer retries ThrottlingException and transient (5xx, connection)
		// failures with jittered backoff; a per-call deadline bounds the whole.
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			// No client-side retry quota: the SDK's default bucket, shared by every signer
			// of the client, runs dry under sustained throttling and then retries nothing at
			// all. The per-call deadline and maxAttempts bound the retries instead.
			so.RateLimiter = ratelimit.None
			so.Backoff = retry.BackoffDelayerFunc(func(attempt int, _ error) (time.Duration, error) { return kmsBackoff(attempt), nil })
		})
	})
	keyOf, addrs, err := resolveKMSKeys(ctx, "aws kms", "signers.awsKms.keys", cfg.Keys, timeout, func(ctx context.Context, keyID string) ([]byte, error) {
		out, err := client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
		if err != nil {
			return nil, err
		}
		if out.KeySpec != kmstypes.KeySpecEccSecgP256k1 {
			return nil, fmt.Errorf("%w: key spec is %s, not %s", ErrNotSecp256k1, out.KeySpec, kmstypes.KeySpecEccSecgP256k1)
		}
		if out.KeyUsage != kmstypes.KeyUsageTypeSignVerify {
			return nil, fmt.Errorf("key usage is %s, not %s", out.KeyUsage, kmstypes.KeyUsageTypeSignVerify)
		}
		return out.PublicKey, nil
	})
	if err != nil {
		return nil, err
	}
	return &AWSKMSSource{kmsSource{
		name: "aws kms", keyOf: keyOf, addrs: addrs, timeout: timeout,
		signDigest: func(ctx context.Context, keyID string, digest []byte) ([]byte, error) {
			out, err := client.Sign(ctx, &kms.SignInput{
				KeyId:            aws.String(keyID),
				Message:          digest,
				MessageType:      kmstypes.MessageTypeDigest,
				SigningAlgorithm: kmstypes.SigningAlgorithmSpecEcdsaSha256,
			})
			if err != nil {
				return nil, err
			}
			return out.Signature, nil
		},
	}}, nil
}
