package signer

import (
	"context"
	"encoding/asn1"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"golang.org/x/sync/errgroup"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Errors a KMS's answer can earn. Both mean the KMS (or the key behind an id) is not what
// the configuration says, so retrying will not help.
var (
	// ErrNotSecp256k1: the key's public key is not a secp256k1 key, or its signature is not
	// a valid ECDSA signature on that curve.
	ErrNotSecp256k1 = errors.New("not a secp256k1 key")
	// ErrKMSSignatureMismatch: the signature does not recover to the key's address.
	ErrKMSSignatureMismatch = errors.New("KMS signature does not belong to the key")
)

// kmsConcurrentLookups bounds the public-key look-ups at startup.
const kmsConcurrentLookups = 8

// Bounds of the wait before a KMS call is tried again. A KMS signs in tens of milliseconds
// and its quotas are per second, so the first retry comes soon; a wait of many seconds
// would outlive the call's deadline anyway.
const (
	kmsFirstBackoff = 50 * time.Millisecond
	kmsMaxBackoff   = time.Second
)

// kmsBackoff is the wait before retry number retry (1 for the first): a random duration up
// to kmsFirstBackoff doubled per earlier retry, capped at kmsMaxBackoff ("full jitter",
// so callers throttled together do not come back together).
func kmsBackoff(retry int) time.Duration {
	ceiling := kmsMaxBackoff
	if retry < 10 {
		ceiling = min(kmsMaxBackoff, kmsFirstBackoff<<max(retry-1, 0))
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// kmsSource signs with keys a cloud KMS holds. The KMS signs a digest and answers with an
// ASN.1 DER ECDSA signature; this turns it into the [R || S || V] form Ethereum needs. It
// is immutable after construction and the KMS clients are safe for concurrent use, so
// SignTx may be called from any number of goroutines.
type kmsSource struct {
	// name prefixes every error ("aws kms", "gcp kms") so a log line says which source failed.
	name  string
	keyOf map[common.Address]string // signer -> key id
	addrs []common.Address          // sorted
	// timeout bounds one signature, retries included, whatever the caller's deadline.
	timeout time.Duration
	// signDigest asks the KMS to sign a 32-byte digest with a key and returns the DER
	// signature as the KMS sent it.
	signDigest func(ctx context.Context, keyID string, digest []byte) ([]byte, error)
}

// kmsBounds is a KMS source's per-call deadline and tries per call, the defaults where the
// configuration leaves them unset.
func kmsBounds(timeout conf.Duration, maxAttempts int) (time.Duration, int) {
	t := timeout.Std()
	if t <= 0 {
		t = DefaultKMSTimeout
	}
	if maxAttempts <= 0 {
		maxAttempts = DefaultKMSMaxAttempts
	}
	return t, maxAttempts
}

// resolveKMSKeys asks the KMS for each configured key's public key (publicKeyDER, an X.509
// SubjectPublicKeyInfo), each look-up within timeout, and maps the address it belongs to
// to the key id. field is the configuration key named in errors. A key that cannot be
// read, is not secp256k1, holds another address than configured, or shares an address with
// another key fails it all.
func resolveKMSKeys(ctx context.Context, name, field string, keys []conf.KMSKey, timeout time.Duration,
	publicKeyDER func(ctx context.Context, keyID string) ([]byte, error)) (map[common.Address]string, []common.Address, error) {
	if len(keys) == 0 {
		return nil, nil, fmt.Errorf("%s: %s is empty", name, field)
	}
	found := make([]common.Address, len(keys))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(kmsConcurrentLookups)
	for i, key := range keys {
		g.Go(func() error {
			ctx, cancel := context.WithTimeout(gctx, timeout)
			defer cancel()
			der, err := publicKeyDER(ctx, key.ID)
			if err != nil {
				return fmt.Errorf("%s: key %s (%s[%d]): get public key: %w", name, key.ID, field, i, err)
			}
			addr, err := addressFromPublicKeyDER(der)
			if err != nil {
				return fmt.Errorf("%s: key %s (%s[%d]): %w", name, key.ID, field, i, err)
			}
			if key.Address != "" {
				want, err := domain.ParseAddress(fmt.Sprintf("%s[%d].address", field, i), key.Address)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				if want != addr {
					return fmt.Errorf("%s: key %s holds signer %s, but %s[%d].address says %s", name, key.ID, addr.Hex(), field, i, want.Hex())
				}
			}
			found[i] = addr
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	keyOf := make(map[common.Address]string, len(keys))
	for i, addr := range found {
		if other, dup := keyOf[addr]; dup {
			return nil, nil, fmt.Errorf("%s: keys %s and %s both hold signer %s", name, other, keys[i].ID, addr.Hex())
		}
		keyOf[addr] = keys[i].ID
	}
	slices.SortFunc(found, common.Address.Cmp)
	return keyOf, found, nil
}

// Addresses lists the signers the KMS holds keys for, sorted.
func (s *kmsSource) Addresses() []common.Address { return slices.Clone(s.addrs) }

// SignTx signs tx for chainID with from's key in the KMS. The call ends at ctx's deadline
// or the source's timeout, whichever comes first.
func (s *kmsSource) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	keyID, held := s.keyOf[from]
	if !held {
		return nil, fmt.Errorf("%s: sign for %s: %w", s.name, from.Hex(), domain.ErrUnknownSigner)
	}
	if tx == nil {
		return nil, errors.New("nil transaction")
	}
	if err := checkChainID(chainID); err != nil {
		return nil, err
	}
	signer := types.LatestSignerForChainID(chainID)
	digest := signer.Hash(tx)
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	der, err := s.signDigest(ctx, keyID, digest[:])
	if err != nil {
		// A client may report the deadline as its own status (gRPC's DeadlineExceeded)
		// rather than the context's error; say it the one way callers can test for.
		if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
			err = fmt.Errorf("%w: %w", ctxErr, err)
		}
		return nil, fmt.Errorf("%s: sign for %s with key %s: %w", s.name, from.Hex(), keyID, err)
	}
	sig, err := ethereumSignature(digest[:], der, from)
	if err != nil {
		return nil, fmt.Errorf("%s: sign for %s with key %s: %w", s.name, from.Hex(), keyID, err)
	}
	signed, err := tx.WithSignature(signer, sig)
	if err != nil {
		return nil, fmt.Errorf("%s: sign for %s: %w", s.name, from.Hex(), err)
	}
	return signed, nil
}

// OIDs of an X.509 SubjectPublicKeyInfo for a secp256k1 key (RFC 5480, SEC 2).
var (
	oidPublicKeyECDSA = asn1.ObjectIdentifier{1, 2, 840, 10045, 2, 1}
	oidSecp256k1      = asn1.ObjectIdentifier{1, 3, 132, 0, 10}
)

// subjectPublicKeyInfo is X.509's SubjectPublicKeyInfo. The algorithm parameters are kept
// raw: an RSA key's are NULL, not an OID, and must earn a clear error, not a parse error.
type subjectPublicKeyInfo struct {
	Algorithm struct {
		Algorithm  asn1.ObjectIdentifier
		Parameters asn1.RawValue `asn1:"optional"`
	}
	PublicKey asn1.BitString
}

// addressFromPublicKeyDER is the Ethereum address of a secp256k1 public key given as a DER
// SubjectPublicKeyInfo, the form both AWS KMS and Google Cloud KMS (inside PEM) return.
// crypto/x509 cannot do this: it knows no secp256k1.
func addressFromPublicKeyDER(der []byte) (common.Address, error) {
	var spki subjectPublicKeyInfo
	rest, err := asn1.Unmarshal(der, &spki)
	if err != nil {
		return common.Address{}, fmt.Errorf("public key is not a DER SubjectPublicKeyInfo: %w", err)
	}
	if len(rest) > 0 {
		return common.Address{}, fmt.Errorf("public key has %d bytes after its SubjectPublicKeyInfo", len(rest))
	}
	if !spki.Algorithm.Algorithm.Equal(oidPublicKeyECDSA) {
		return common.Address{}, fmt.Errorf("%w: public key algorithm is %s, not EC", ErrNotSecp256k1, spki.Algorithm.Algorithm)
	}
	var curve asn1.ObjectIdentifier
	if rest, err := asn1.Unmarshal(spki.Algorithm.Parameters.FullBytes, &curve); err != nil || len(rest) > 0 {
		return common.Address{}, fmt.Errorf("%w: EC public key names no curve", ErrNotSecp256k1)
	}
	if !curve.Equal(oidSecp256k1) {
		return common.Address{}, fmt.Errorf("%w: EC public key is on curve %s, not secp256k1 (%s)", ErrNotSecp256k1, curve, oidSecp256k1)
	}
	point := spki.PublicKey.RightAlign()
	if spki.PublicKey.BitLength%8 != 0 {
		return common.Address{}, fmt.Errorf("%w: public key is not whole bytes", ErrNotSecp256k1)
	}
	var pub []byte
	switch len(point) {
	case 65: // uncompressed, 0x04 || X || Y; UnmarshalPubkey checks the point is on the curve
		key, err := crypto.UnmarshalPubkey(point)
		if err != nil {
			return common.Address{}, fmt.Errorf("%w: %w", ErrNotSecp256k1, err)
		}
		pub = crypto.FromECDSAPub(key)
	case 33: // compressed
		key, err := crypto.DecompressPubkey(point)
		if err != nil {
			return common.Address{}, fmt.Errorf("%w: %w", ErrNotSecp256k1, err)
		}
		pub = crypto.FromECDSAPub(key)
	default:
		return common.Address{}, fmt.Errorf("%w: public key point is %d bytes", ErrNotSecp256k1, len(point))
	}
	return common.BytesToAddress(crypto.Keccak256(pub[1:])[12:]), nil
}

var (
	secp256k1N     = crypto.S256().Params().N
	secp256k1HalfN = new(big.Int).Rsh(secp256k1N, 1)
)

// ecdsaSignature is the ASN.1 ECDSA-Sig-Value (RFC 3279) a KMS returns.
type ecdsaSignature struct {
	R, S *big.Int
}

// parseDERSignature reads an ASN.1 DER ECDSA signature and checks r and s are in 1..N-1.
func parseDERSignature(der []byte) (r, s *big.Int, err error) {
	var sig ecdsaSignature
	rest, err := asn1.Unmarshal(der, &sig)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: signature is not DER: %w", ErrNotSecp256k1, err)
	}
	if len(rest) > 0 {
		return nil, nil, fmt.Errorf("%w: signature has %d bytes after its DER value", ErrNotSecp256k1, len(rest))
	}
	for _, v := range []*big.Int{sig.R, sig.S} {
		if v.Sign() <= 0 || v.Cmp(secp256k1N) >= 0 {
			return nil, nil, fmt.Errorf("%w: signature value out of range", ErrNotSecp256k1)
		}
	}
	return sig.R, sig.S, nil
}

// lowS returns s, or N-s when s is in the upper half. Both are valid ECDSA signatures, but
// Ethereum accepts only the lower (EIP-2), and a KMS returns either.
func lowS(s *big.Int) *big.Int {
	if s.Cmp(secp256k1HalfN) > 0 {
		return new(big.Int).Sub(secp256k1N, s)
	}
	return s
}

// recoverableSignature is [R || S || V] for digest, with V (0 or 1) the recovery id under
// which the signature recovers to want. A KMS does not say which of the two candidate
// public keys its signature recovers to, so both are tried; neither matching means the
// KMS signed with another key than the one the address came from.
func recoverableSignature(digest []byte, r, s *big.Int, want common.Address) ([]byte, error) {
	sig := make([]byte, crypto.SignatureLength)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:64])
	for v := range byte(2) {
		sig[crypto.RecoveryIDOffset] = v
		pub, err := crypto.SigToPub(digest, sig)
		if err == nil && crypto.PubkeyToAddress(*pub) == want {
			return sig, nil
		}
	}
	return nil, fmt.Errorf("%w: it recovers to neither candidate for %s", ErrKMSSignatureMismatch, want.Hex())
}

// ethereumSignature turns a KMS's DER signature of digest into the [R || S || V] form
// go-ethereum's WithSignature takes, low-s and with the recovery id of want.
func ethereumSignature(digest, der []byte, want common.Address) ([]byte, error) {
	r, s, err := parseDERSignature(der)
	if err != nil {
		return nil, err
	}
	return recoverableSignature(digest, r, lowS(s), want)
}
