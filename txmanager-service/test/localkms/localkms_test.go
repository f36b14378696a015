package localkms_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/aws/smithy-go"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/test/localkms"
)

// The emulator starts on a port of its own, makes secp256k1 keys and signs digests with
// them; the front passes, throttles and hangs as told.
func TestEmulatorAndFront(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := localkms.FindInRepo()
	if err != nil {
		t.Fatal(err)
	}
	server, err := localkms.Start(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	defer server.Stop()
	front, err := localkms.StartFront(server.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer front.Close()
	id, addr, err := server.CreateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// One try per call, so each throttled answer is seen.
	client := kms.New(kms.Options{Region: localkms.Region, BaseEndpoint: aws.String(front.URL()), Credentials: localkms.Credentials(), RetryMaxAttempts: 1})
	digest := crypto.Keccak256([]byte("txm"))
	sign := func(ctx context.Context) ([]byte, error) {
		out, err := client.Sign(ctx, &kms.SignInput{KeyId: aws.String(id), Message: digest, MessageType: kmstypes.MessageTypeDigest, SigningAlgorithm: kmstypes.SigningAlgorithmSpecEcdsaSha256})
		if err != nil {
			return nil, err
		}
		return out.Signature, nil
	}
	der, err := sign(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(der) < 8 || der[0] != 0x30 {
		t.Fatalf("signature %x is not DER", der)
	}
	if (addr == [20]byte{}) || front.SignCalls() != 1 {
		t.Fatalf("address %s, %d Sign requests through the front", addr.Hex(), front.SignCalls())
	}

	front.Throttle(1)
	var throttled smithy.APIError
	if _, err := sign(ctx); !errors.As(err, &throttled) || throttled.ErrorCode() != "ThrottlingException" {
		t.Fatalf("throttled: %v, want ThrottlingException", err)
	}
	if _, err := sign(ctx); err != nil {
		t.Fatalf("after the throttling: %v", err)
	}

	front.Hang()
	hung, cancelHung := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelHung()
	if _, err := sign(hung); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung: %v, want the deadline", err)
	}
	front.Release()

	if err := server.DisableKey(ctx, id); err != nil {
		t.Fatal(err)
	}
	var disabled *kmstypes.DisabledException
	if _, err := sign(ctx); !errors.As(err, &disabled) {
		t.Fatalf("disabled key: %v, want DisabledException", err)
	}
}
