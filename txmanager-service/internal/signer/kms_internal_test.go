package signer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/asn1"
	"encoding/hex"
	"errors"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// kmsPublicKeyFixture is a public key exactly as local-kms's GetPublicKey returned it for
// an ECC_SECG_P256K1 key (DER SubjectPublicKeyInfo); its last 65 bytes are the point.
const kmsPublicKeyFixture = "3056301006072a8648ce3d020106052b8104000a03420004885bb2fe6dba730f6bc1752e27310fff30c7bddd5e72bac03547bd46e0dd5f735ea1ddccaedc20da1af7e215e020140236bbc948ed04ddfbd35861131d4417cf"

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// spki encodes a SubjectPublicKeyInfo with the given algorithm, curve and point.
func spki(t *testing.T, algorithm, curve asn1.ObjectIdentifier, point []byte) []byte {
	t.Helper()
	der, err := asn1.Marshal(struct {
		Algorithm struct{ Algorithm, Curve asn1.ObjectIdentifier }
		PublicKey asn1.BitString
	}{struct{ Algorithm, Curve asn1.ObjectIdentifier }{algorithm, curve}, asn1.BitString{Bytes: point, BitLength: 8 * len(point)}})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestAddressFromPublicKeyDER(t *testing.T) {
	t.Parallel()
	fixture := mustHex(t, kmsPublicKeyFixture)
	fixturePub, err := crypto.UnmarshalPubkey(fixture[len(fixture)-65:])
	if err != nil {
		t.Fatal(err)
	}
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	p256, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p256DER, err := x509.MarshalPKIXPublicKey(&p256.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	rsaKey, err := rsa.GenerateKey(rand.Reader, 1024) //nolint:gosec // a fixture, never used to protect anything
	if err != nil {
		t.Fatal(err)
	}
	rsaDER, err := x509.MarshalPKIXPublicKey(&rsaKey.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	offCurve := crypto.FromECDSAPub(&key.PublicKey)
	offCurve[64] ^= 1
	tests := []struct {
		name      string
		der       []byte
		want      common.Address
		wantErr   error
		wantInErr string
	}{
		{name: "local-kms answer", der: fixture, want: crypto.PubkeyToAddress(*fixturePub)},
		{name: "uncompressed point", der: spki(t, oidPublicKeyECDSA, oidSecp256k1, crypto.FromECDSAPub(&key.PublicKey)), want: crypto.PubkeyToAddress(key.PublicKey)},
		{name: "compressed point", der: spki(t, oidPublicKeyECDSA, oidSecp256k1, crypto.CompressPubkey(&key.PublicKey)), want: crypto.PubkeyToAddress(key.PublicKey)},
		{name: "P-256 key", der: p256DER, wantErr: ErrNotSecp256k1, wantInErr: "curve 1.2.840.10045.3.1.7, not secp256k1"},
		{name: "RSA key", der: rsaDER, wantErr: ErrNotSecp256k1, wantInErr: "not EC"},
		{name: "point off the curve", der: spki(t, oidPublicKeyECDSA, oidSecp256k1, offCurve), wantErr: ErrNotSecp256k1},
		{name: "short point", der: spki(t, oidPublicKeyECDSA, oidSecp256k1, offCurve[:40]), wantErr: ErrNotSecp256k1, wantInErr: "40 bytes"},
		{name: "trailing bytes", der: append(append([]byte{}, fixture...), 0), wantInErr: "after its SubjectPublicKeyInfo"},
		{name: "not DER", der: []byte("-----BEGIN PUBLIC KEY-----"), wantInErr: "not a DER SubjectPublicKeyInfo"},
		{name: "empty", der: nil, wantInErr: "not a DER SubjectPublicKeyInfo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := addressFromPublicKeyDER(tt.der)
			if tt.wantErr == nil && tt.wantInErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("got (%s, %v), want %s", got.Hex(), err, tt.want.Hex())
				}
				return
			}
			if err == nil {
				t.Fatalf("accepted as %s", got.Hex())
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v is not %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantInErr) {
				t.Fatalf("error %q does not mention %q", err, tt.wantInErr)
			}
		})
	}
}

func derSignature(t *testing.T, r, s *big.Int) []byte {
	t.Helper()
	der, err := asn1.Marshal(ecdsaSignature{r, s})
	if err != nil {
		t.Fatal(err)
	}
	return der
}

func TestParseDERSignature(t *testing.T) {
	t.Parallel()
	one, nMinus1 := big.NewInt(1), new(big.Int).Sub(secp256k1N, big.NewInt(1))
	valid := derSignature(t, one, nMinus1)
	tests := []struct {
		name    string
		der     []byte
		wantR   *big.Int
		wantS   *big.Int
		wantErr string
	}{
		{name: "smallest and largest values", der: valid, wantR: one, wantS: nMinus1},
		{name: "r is zero", der: derSignature(t, big.NewInt(0), one), wantErr: "out of range"},
		{name: "s is N", der: derSignature(t, one, secp256k1N), wantErr: "out of range"},
		{name: "negative s", der: derSignature(t, one, big.NewInt(-5)), wantErr: "out of range"},
		{name: "trailing bytes", der: append(append([]byte{}, valid...), 0, 0), wantErr: "2 bytes after"},
		{name: "raw 64 bytes, not DER", der: make([]byte, 64), wantErr: "not DER"},
		{name: "empty", der: nil, wantErr: "not DER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, s, err := parseDERSignature(tt.der)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrNotSecp256k1) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got (%v, %v, %v), want an ErrNotSecp256k1 mentioning %q", r, s, err, tt.wantErr)
				}
				return
			}
			if err != nil || r.Cmp(tt.wantR) != 0 || s.Cmp(tt.wantS) != 0 {
				t.Fatalf("got (%v, %v, %v), want (%v, %v)", r, s, err, tt.wantR, tt.wantS)
			}
		})
	}
}

func TestLowS(t *testing.T) {
	t.Parallel()
	half := new(big.Int).Set(secp256k1HalfN)
	tests := []struct {
		name string
		s    *big.Int
		want *big.Int
	}{
		{"one stays", big.NewInt(1), big.NewInt(1)},
		{"half of N stays", half, half},
		{"just above half flips", new(big.Int).Add(half, big.NewInt(1)), new(big.Int).Sub(secp256k1N, new(big.Int).Add(half, big.NewInt(1)))},
		{"N-1 flips to 1", new(big.Int).Sub(secp256k1N, big.NewInt(1)), big.NewInt(1)},
	}
	for _, tt := range tests {
		if got := lowS(tt.s); got.Cmp(tt.want) != 0 {
			t.Errorf("%s: lowS = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// signedDigest is a digest signed by key (go-ethereum's low-s [R || S || V]) whose
// recovery id is v: digests are tried until one gives it, so both ids are covered.
func signedDigest(t *testing.T, key *ecdsa.PrivateKey, v byte) (digest, sig []byte) {
	t.Helper()
	for i := range 256 {
		digest = crypto.Keccak256([]byte{byte(i), v})
		sig, err := crypto.Sign(digest, key)
		if err != nil {
			t.Fatal(err)
		}
		if sig[64] == v {
			return digest, sig
		}
	}
	t.Fatalf("no digest with recovery id %d", v)
	return nil, nil
}

// A KMS signature, low-s or high-s, becomes exactly the signature go-ethereum would make
// with the private key: same (r, low s) and the recovery id that recovers the signer.
func TestEthereumSignatureFromKMS(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	other, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	signer := crypto.PubkeyToAddress(key.PublicKey)
	for _, v := range []byte{0, 1} {
		digest, want := signedDigest(t, key, v)
		r, s := new(big.Int).SetBytes(want[:32]), new(big.Int).SetBytes(want[32:64])
		highS := new(big.Int).Sub(secp256k1N, s)
		tests := []struct {
			name    string
			der     []byte
			addr    common.Address
			wantErr error
		}{
			{name: "low s", der: derSignature(t, r, s), addr: signer},
			{name: "high s is normalised", der: derSignature(t, r, highS), addr: signer},
			{name: "another key's address", der: derSignature(t, r, s), addr: crypto.PubkeyToAddress(other.PublicKey), wantErr: ErrKMSSignatureMismatch},
			{name: "not a signature", der: []byte{0x30, 0x00}, addr: signer, wantErr: ErrNotSecp256k1},
		}
		for _, tt := range tests {
			got, err := ethereumSignature(digest, tt.der, tt.addr)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Errorf("recovery id %d, %s: got (%x, %v), want %v", v, tt.name, got, err, tt.wantErr)
				}
				continue
			}
			if err != nil || hex.EncodeToString(got) != hex.EncodeToString(want) {
				t.Errorf("recovery id %d, %s: got (%x, %v), want %x", v, tt.name, got, err, want)
			}
		}
	}
}

// localDigestSigner stands in for a KMS in the pure tests of kmsSource: it signs digests
// with in-memory keys and answers in DER, high-s every other time.
type localDigestSigner struct {
	mu    sync.Mutex
	keys  map[string]*ecdsa.PrivateKey
	calls int
}

func (l *localDigestSigner) signDigest(_ context.Context, keyID string, digest []byte) ([]byte, error) {
	l.mu.Lock()
	key := l.keys[keyID]
	l.calls++
	flip := l.calls%2 == 0
	l.mu.Unlock()
	sig, err := crypto.Sign(digest, key)
	if err != nil {
		return nil, err
	}
	r, s := new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:64])
	if flip {
		s.Sub(secp256k1N, s)
	}
	return asn1.Marshal(ecdsaSignature{r, s})
}

func TestKMSSourceSignsEveryTransactionType(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	kms := &localDigestSigner{keys: map[string]*ecdsa.PrivateKey{"key-1": key}}
	src := &kmsSource{name: "test kms", keyOf: map[common.Address]string{from: "key-1"}, addrs: []common.Address{from}, timeout: time.Second, signDigest: kms.signDigest}
	chainID := big.NewInt(1337)
	to := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	txs := map[string]*types.Transaction{
		"legacy":          types.NewTx(&types.LegacyTx{Nonce: 1, To: &to, Gas: 21_000, GasPrice: big.NewInt(5), Value: big.NewInt(1)}),
		"access list":     types.NewTx(&types.AccessListTx{ChainID: chainID, Nonce: 2, To: &to, Gas: 21_000, GasPrice: big.NewInt(5)}),
		"dynamic fee":     types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: 3, To: &to, Gas: 21_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2)}),
		"contract create": types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: 4, Gas: 90_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2), Data: []byte{0x60, 0}}),
	}
	signer := types.LatestSignerForChainID(chainID)
	for name, tx := range txs {
		for range 2 { // once with a low-s answer, once with a high-s one
			signed, err := src.SignTx(context.Background(), from, tx, chainID)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if got, err := types.Sender(signer, signed); err != nil || got != from {
				t.Fatalf("%s: sender (%s, %v), want %s", name, got.Hex(), err, from.Hex())
			}
			if signer.Hash(signed) != signer.Hash(tx) || signed.Type() != tx.Type() {
				t.Fatalf("%s: the signed transaction is not the one asked for", name)
			}
			if _, _, s := signed.RawSignatureValues(); s.Cmp(secp256k1HalfN) > 0 {
				t.Fatalf("%s: s is in the upper half", name)
			}
		}
	}
}

func TestKMSSourceErrorsNameTheSigner(t *testing.T) {
	t.Parallel()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	impostor, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	from := crypto.PubkeyToAddress(key.PublicKey)
	tx := types.NewTx(&types.DynamicFeeTx{Nonce: 1, Gas: 21_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2)})
	wrongKey := &localDigestSigner{keys: map[string]*ecdsa.PrivateKey{"key-1": impostor}}
	tests := []struct {
		name       string
		signDigest func(ctx context.Context, keyID string, digest []byte) ([]byte, error)
		signFor    common.Address
		wantErr    error
	}{
		{name: "KMS refuses", signDigest: func(context.Context, string, []byte) ([]byte, error) {
			return nil, errors.New("AccessDeniedException: not authorized to perform kms:Sign")
		}, signFor: from},
		{name: "KMS signs with another key", signDigest: wrongKey.signDigest, signFor: from, wantErr: ErrKMSSignatureMismatch},
		{name: "KMS stops answering", signDigest: func(ctx context.Context, _ string, _ []byte) ([]byte, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}, signFor: from, wantErr: context.DeadlineExceeded},
		{name: "an address it holds no key for", signFor: crypto.PubkeyToAddress(impostor.PublicKey), wantErr: domain.ErrUnknownSigner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := &kmsSource{name: "test kms", keyOf: map[common.Address]string{from: "key-1"}, addrs: []common.Address{from}, timeout: 50 * time.Millisecond, signDigest: tt.signDigest}
			_, err := src.SignTx(context.Background(), tt.signFor, tx, big.NewInt(1337))
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "test kms: sign for "+tt.signFor.Hex()) {
				t.Fatalf("error %q does not name the source and the signer", err)
			}
		})
	}
}

func TestKMSBackoffStaysUnderItsCeiling(t *testing.T) {
	t.Parallel()
	tests := []struct {
		retry   int
		ceiling time.Duration
	}{
		{0, kmsFirstBackoff}, {1, kmsFirstBackoff}, {2, 2 * kmsFirstBackoff}, {3, 4 * kmsFirstBackoff},
		{5, 16 * kmsFirstBackoff}, {6, kmsMaxBackoff}, {40, kmsMaxBackoff}, {1 << 20, kmsMaxBackoff},
	}
	for _, tt := range tests {
		for range 200 {
			if got := kmsBackoff(tt.retry); got < 0 || got > tt.ceiling {
				t.Fatalf("kmsBackoff(%d) = %s, want within 0..%s", tt.retry, got, tt.ceiling)
			}
		}
	}
}
