// Package gcpkms is a stand-in for Google Cloud KMS in tests: no emulator of Cloud KMS
// exists, so this serves the real KMS API (the google.cloud.kms.v1 protos, gRPC) on
// loopback with real secp256k1 keys, and the service reaches it through the real
// cloud.google.com/go/kms client.
//
// What it covers: the request and answer shapes, the CRC32C checksums in both directions,
// DER signatures that are high-s about half the time (as a KMS returns them), the
// algorithm of each key version, status codes for a missing key (NotFound), a key the
// caller may not use (PermissionDenied), quota exhaustion (ResourceExhausted) and a KMS
// that stops answering. What it does not: Cloud IAM, Workload Identity, TLS, or the
// service's real latency and quotas.
package gcpkms

import (
	"context"
	"crypto/ecdsa"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"hash/crc32"
	"math/big"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"cloud.google.com/go/kms/apiv1/kmspb"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Server is a Cloud KMS KeyManagementService with GetPublicKey and AsymmetricSign, on
// 127.0.0.1 and a port the kernel picked. Safe for concurrent use.
type Server struct {
	kmspb.UnimplementedKeyManagementServiceServer

	addr    string
	grpc    *grpc.Server
	serving sync.WaitGroup

	mu     sync.Mutex
	keys   map[string]keyVersion // by crypto key version name
	hung   chan struct{}         // closed by Release; nil while answering
	closed chan struct{}

	throttle atomic.Int64 // the next n signing calls answer ResourceExhausted
	corrupt  atomic.Bool  // answer signatures with a wrong checksum
	signs    atomic.Int64 // AsymmetricSign calls received
	latency  atomic.Int64 // time.Duration each AsymmetricSign takes before answering
	highS    atomic.Uint64
}

type keyVersion struct {
	key       *ecdsa.PrivateKey
	algorithm kmspb.CryptoKeyVersion_CryptoKeyVersionAlgorithm
	denied    bool
}

// Start serves on 127.0.0.1:0.
func Start() (*Server, error) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("gcpkms: listen: %w", err)
	}
	s := &Server{addr: listener.Addr().String(), grpc: grpc.NewServer(), keys: map[string]keyVersion{}, closed: make(chan struct{})}
	kmspb.RegisterKeyManagementServiceServer(s.grpc, s)
	s.serving.Go(func() { _ = s.grpc.Serve(listener) })
	return s, nil
}

// Addr is host:port, for option.WithEndpoint.
func (s *Server) Addr() string { return s.addr }

// KeyName is a crypto key version name in the server's made-up project.
func KeyName(key string) string {
	return "projects/txm-test/locations/global/keyRings/txm/cryptoKeys/" + key + "/cryptoKeyVersions/1"
}

// AddKey makes name a secp256k1 signing key version holding key.
func (s *Server) AddKey(name string, key *ecdsa.PrivateKey) common.Address {
	s.setKey(name, keyVersion{key: key, algorithm: kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256})
	return crypto.PubkeyToAddress(key.PublicKey)
}

// AddP256Key makes name a key version of another algorithm (EC_SIGN_P256_SHA256), which
// the service must refuse. Its public key is reported, not served: only the algorithm is
// looked at before refusing.
func (s *Server) AddP256Key(name string, key *ecdsa.PrivateKey) {
	s.setKey(name, keyVersion{key: key, algorithm: kmspb.CryptoKeyVersion_EC_SIGN_P256_SHA256})
}

// Deny makes calls on name fail with PermissionDenied, as when the caller's service
// account lacks roles/cloudkms.signerVerifier on the key.
func (s *Server) Deny(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keys[name]
	k.denied = true
	s.keys[name] = k
}

func (s *Server) setKey(name string, k keyVersion) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[name] = k
}

// Hang makes every call wait, unanswered, until Release or the caller gives up.
func (s *Server) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung == nil {
		s.hung = make(chan struct{})
	}
}

// Release answers again.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
}

// Throttle answers the next n AsymmetricSign calls with ResourceExhausted, as Cloud KMS
// does when a project's request quota is used up.
func (s *Server) Throttle(n int) { s.throttle.Store(int64(n)) }

// SetLatency makes every AsymmetricSign take d before it answers, as a KMS in another
// region or under load does (tens of milliseconds is usual).
func (s *Server) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// CorruptSignatures makes the signature checksum of every answer wrong (damage in transit).
func (s *Server) CorruptSignatures(on bool) { s.corrupt.Store(on) }

// SignCalls is how many AsymmetricSign calls arrived, throttled ones included.
func (s *Server) SignCalls() int64 { return s.signs.Load() }

// HighSAnswers is how many signatures were sent high-s (which the client must normalise).
func (s *Server) HighSAnswers() uint64 { return s.highS.Load() }

// Close stops serving; hung calls end.
func (s *Server) Close() {
	s.mu.Lock()
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
	s.mu.Unlock()
	s.Release()
	s.grpc.Stop()
	s.serving.Wait()
}

// lookup waits out a hang, then finds name's key or the status the real API would give.
func (s *Server) lookup(ctx context.Context, name string) (keyVersion, error) {
	s.mu.Lock()
	hung := s.hung
	k, ok := s.keys[name]
	s.mu.Unlock()
	if hung != nil {
		select {
		case <-hung:
		case <-s.closed:
		case <-ctx.Done():
			return keyVersion{}, status.FromContextError(ctx.Err()).Err()
		}
	}
	switch {
	case !ok:
		return keyVersion{}, status.Errorf(codes.NotFound, "CryptoKeyVersion %s not found.", name)
	case k.denied:
		return keyVersion{}, status.Errorf(codes.PermissionDenied, "Permission 'cloudkms.cryptoKeyVersions.useToSign' denied on resource '%s' (or it may not exist).", name)
	}
	return k, nil
}

// GetPublicKey answers with the key's SubjectPublicKeyInfo in PEM and its CRC32C.
func (s *Server) GetPublicKey(ctx context.Context, req *kmspb.GetPublicKeyRequest) (*kmspb.PublicKey, error) {
	k, err := s.lookup(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	resp := &kmspb.PublicKey{Name: req.GetName(), Algorithm: k.algorithm, ProtectionLevel: kmspb.ProtectionLevel_HSM}
	if k.algorithm == kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256 {
		der, err := marshalSecp256k1SPKI(&k.key.PublicKey)
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		resp.Pem = string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	resp.PemCrc32C = wrapperspb.Int64(int64(crc32c([]byte(resp.Pem))))
	return resp, nil
}

// AsymmetricSign signs the SHA-256-typed digest, as Cloud KMS does for secp256k1: it signs
// the 32 bytes it is given, whatever hash made them.
func (s *Server) AsymmetricSign(ctx context.Context, req *kmspb.AsymmetricSignRequest) (*kmspb.AsymmetricSignResponse, error) {
	s.signs.Add(1)
	if d := time.Duration(s.latency.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if s.throttle.Add(-1) >= 0 {
		return nil, status.Error(codes.ResourceExhausted, "Quota exceeded for quota metric 'Asymmetric cryptographic requests'.")
	}
	k, err := s.lookup(ctx, req.GetName())
	if err != nil {
		return nil, err
	}
	if k.algorithm != kmspb.CryptoKeyVersion_EC_SIGN_SECP256K1_SHA256 {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not a secp256k1 key", req.GetName())
	}
	digest := req.GetDigest().GetSha256()
	if len(digest) != 32 {
		return nil, status.Error(codes.InvalidArgument, "digest must be a 32-byte SHA-256 digest")
	}
	if sum := req.GetDigestCrc32C(); sum != nil && sum.GetValue() != int64(crc32c(digest)) {
		return nil, status.Error(codes.InvalidArgument, "The checksum in field digest_crc32c did not match the data in field digest.")
	}
	der, err := s.signDER(digest, k.key)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	sum := int64(crc32c(der))
	if s.corrupt.Load() {
		sum++
	}
	return &kmspb.AsymmetricSignResponse{
		Name: req.GetName(), Signature: der, SignatureCrc32C: wrapperspb.Int64(sum),
		VerifiedDigestCrc32C: req.GetDigestCrc32C() != nil, ProtectionLevel: kmspb.ProtectionLevel_HSM,
	}, nil
}

// signDER signs digest and encodes (r, s) in DER, sending every other signature with s in
// the upper half: a KMS does not normalise s, so the client must.
func (s *Server) signDER(digest []byte, key *ecdsa.PrivateKey) ([]byte, error) {
	sig, err := crypto.Sign(digest, key) // low-s [R || S || V]
	if err != nil {
		return nil, err
	}
	r, sv := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:64])
	if s.signs.Load()%2 == 0 {
		sv.Sub(crypto.S256().Params().N, sv)
		s.highS.Add(1)
	}
	return asn1.Marshal(struct{ R, S *big.Int }{r, sv})
}

// marshalSecp256k1SPKI encodes a secp256k1 public key as an X.509 SubjectPublicKeyInfo,
// which crypto/x509 cannot do (it knows no secp256k1).
func marshalSecp256k1SPKI(pub *ecdsa.PublicKey) ([]byte, error) {
	point := crypto.FromECDSAPub(pub)
	return asn1.Marshal(struct {
		Algorithm struct {
			Algorithm, Curve asn1.ObjectIdentifier
		}
		PublicKey asn1.BitString
	}{
		Algorithm: struct{ Algorithm, Curve asn1.ObjectIdentifier }{
			asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1}, // id-ecPublicKey
			asn1.ObjectIdentifier{1, 3, 132, 0, 10},       // secp256k1
		},
		PublicKey: asn1.BitString{Bytes: point, BitLength: 8 * len(point)},
	})
}

var crc32cTable = crc32.MakeTable(crc32.Castagnoli)

func crc32c(b []byte) uint32 { return crc32.Checksum(b, crc32cTable) }
