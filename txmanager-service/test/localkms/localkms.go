// Package localkms runs github.com/nsmithuk/local-kms, an AWS KMS emulator, as a child
// process for tests: built at a pinned version by `make test-binaries` (tests only look for
// it), started on port 0, reached through the real aws-sdk-go-v2 KMS client.
//
// local-kms creates ECC_SECG_P256K1 keys and signs digests with them (ECDSA_SHA_256,
// MessageType DIGEST), which is what the service's AWS KMS source uses; its seeding file
// cannot hold secp256k1 keys (it parses them with crypto/x509, which knows no secp256k1),
// so keys are created through the API (CreateKey) instead. It does not check request
// signatures or IAM policies: any credentials are accepted, and "denied" can only be shown
// as a disabled key (DisabledException). It binds all interfaces, not only loopback (its
// listen address is ":PORT"); tests reach it on 127.0.0.1.
package localkms

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"
	kmstypes "github.com/aws/aws-sdk-go-v2/service/kms/types"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// ModuleVersion is the local-kms commit the tests run (the module has no tagged release).
const ModuleVersion = "v0.0.0-20260228092603-2a5e92d09ab6"

const modulePath = "github.com/nsmithuk/local-kms"

// Region and the static credentials the emulator is used with.
const (
	Region          = "eu-west-2"
	AccessKeyID     = "local-kms"
	SecretAccessKey = "local-kms-accepts-any-credentials"
)

// FindInRepo is local-kms ModuleVersion as `make test-binaries` built it into the
// monorepo's bin/testbin (found from the working directory); when it is not there the
// error names the target. It installs nothing.
func FindInRepo() (string, error) {
	return e2e.FindTestBinary(modulePath, ModuleVersion)
}

// Server is a running local-kms this process started.
type Server struct {
	proc   *e2e.Process
	url    string
	dir    string
	client *kms.Client
}

// started matches local-kms's line once it listens: "Local KMS started on 0.0.0.0:43121".
var started = regexp.MustCompile(`Local KMS started on [^:\s]*:(\d+)`)

// Start runs local-kms from bin with its database in a fresh temporary folder that Stop
// removes, on a port the kernel picks (PORT=0; the bound port is read from its log).
func Start(ctx context.Context, bin string) (*Server, error) {
	dir, err := os.MkdirTemp("", "txm-local-kms-")
	if err != nil {
		return nil, fmt.Errorf("local-kms: %w", err)
	}
	proc, err := e2e.StartProcess(ctx, e2e.ProcessOptions{
		Name: "local-kms", Bin: bin, LogPath: filepath.Join(dir, "local-kms.log"), Announce: started,
		Env: append(os.Environ(), "PORT=0", "KMS_REGION="+Region, "KMS_DATA_PATH="+filepath.Join(dir, "data"),
			// No seeding file: keys are created through the API.
			"KMS_SEED_PATH="+filepath.Join(dir, "no-seed.yaml")),
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{proc: proc, url: "http://127.0.0.1:" + proc.Announced(), dir: dir}
	s.client = kms.New(kms.Options{Region: Region, BaseEndpoint: aws.String(s.url), Credentials: Credentials()})
	return s, nil
}

// Credentials are static credentials the emulator accepts (it checks none).
func Credentials() aws.CredentialsProvider {
	return credentials.NewStaticCredentialsProvider(AccessKeyID, SecretAccessKey, "")
}

// URL is the emulator's endpoint, for the KMS client's BaseEndpoint.
func (s *Server) URL() string { return s.url }

// CreateKey creates an ECC_SECG_P256K1 signing key and returns its id and the address of
// its public key.
func (s *Server) CreateKey(ctx context.Context) (string, common.Address, error) {
	out, err := s.client.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: kmstypes.KeySpecEccSecgP256k1, KeyUsage: kmstypes.KeyUsageTypeSignVerify})
	if err != nil {
		return "", common.Address{}, fmt.Errorf("local-kms: create key: %w", err)
	}
	id := aws.ToString(out.KeyMetadata.KeyId)
	addr, err := s.Address(ctx, id)
	return id, addr, err
}

// CreateKeyOfSpec creates a signing key of another spec (to be refused).
func (s *Server) CreateKeyOfSpec(ctx context.Context, spec kmstypes.KeySpec) (string, error) {
	out, err := s.client.CreateKey(ctx, &kms.CreateKeyInput{KeySpec: spec, KeyUsage: kmstypes.KeyUsageTypeSignVerify})
	if err != nil {
		return "", fmt.Errorf("local-kms: create %s key: %w", spec, err)
	}
	return aws.ToString(out.KeyMetadata.KeyId), nil
}

// CreateAlias points alias ("alias/...") at keyID.
func (s *Server) CreateAlias(ctx context.Context, alias, keyID string) error {
	if _, err := s.client.CreateAlias(ctx, &kms.CreateAliasInput{AliasName: aws.String(alias), TargetKeyId: aws.String(keyID)}); err != nil {
		return fmt.Errorf("local-kms: create alias %s: %w", alias, err)
	}
	return nil
}

// DisableKey disables keyID: signing with it then fails with DisabledException.
func (s *Server) DisableKey(ctx context.Context, keyID string) error {
	if _, err := s.client.DisableKey(ctx, &kms.DisableKeyInput{KeyId: aws.String(keyID)}); err != nil {
		return fmt.Errorf("local-kms: disable %s: %w", keyID, err)
	}
	return nil
}

// Address derives the Ethereum address of keyID's public key, independently of the
// service's parser: the uncompressed point is the last 65 bytes of a secp256k1
// SubjectPublicKeyInfo.
func (s *Server) Address(ctx context.Context, keyID string) (common.Address, error) {
	out, err := s.client.GetPublicKey(ctx, &kms.GetPublicKeyInput{KeyId: aws.String(keyID)})
	if err != nil {
		return common.Address{}, fmt.Errorf("local-kms: public key of %s: %w", keyID, err)
	}
	if len(out.PublicKey) < 65 {
		return common.Address{}, fmt.Errorf("local-kms: public key of %s is %d bytes", keyID, len(out.PublicKey))
	}
	pub, err := crypto.UnmarshalPubkey(out.PublicKey[len(out.PublicKey)-65:])
	if err != nil {
		return common.Address{}, fmt.Errorf("local-kms: public key of %s: %w", keyID, err)
	}
	return crypto.PubkeyToAddress(*pub), nil
}

// LogTail is the last lines of the emulator's log, for error messages.
func (s *Server) LogTail(lines int) string { return s.proc.LogTail(lines) }

// Stop ends the emulator (it has no graceful exit; its database is thrown away) and
// removes its folder.
func (s *Server) Stop() {
	s.proc.Kill()
	_ = os.RemoveAll(s.dir)
}
