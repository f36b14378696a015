package server

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/transport"
	"github.com/golang-jwt/jwt/v5"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// writeFile writes content to a file of its own in dir and returns its path.
func writeFile(t *testing.T, dir, name string, content []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, content, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func publicKeyPEM(t *testing.T, key crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func sign(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims) string {
	t.Helper()
	token, err := jwt.NewWithClaims(method, claims).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// claims are a valid token's claims for the test issuer and audience, with extra.
func claims(extra jwt.MapClaims) jwt.MapClaims {
	c := jwt.MapClaims{"sub": "billing", "iss": "https://issuer.test", "aud": "txmanager", "exp": time.Now().Add(time.Hour).Unix()}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	return c
}

// opTransport is a server transport for operation carrying the caller's headers.
type opTransport struct {
	fakeTransport
	operation string
}

func (t opTransport) Operation() string { return t.operation }

// authenticated runs a through its middleware for a call with the given headers and
// returns the principal the handler saw.
func authenticated(a *Authenticator, ctx context.Context) (domain.Principal, bool, error) {
	var seen domain.Principal
	var ok bool
	_, err := a.Middleware()(func(ctx context.Context, _ any) (any, error) {
		seen, ok = domain.PrincipalFrom(ctx)
		return nil, nil
	})(ctx, nil)
	return seen, ok, err
}

func callWith(header map[string]string) context.Context {
	h := http.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	return transport.NewServerContext(context.Background(), fakeTransport{header: h})
}

func bearer(token string) map[string]string {
	return map[string]string{"Authorization": "Bearer " + token}
}

// A call is authenticated by an API key (matched by its digest) or a JWT the configured
// key verifies, for the configured issuer and audience and before it expires, and carries
// the grants the key or the token's claims give; anything else is UNAUTHENTICATED.
func TestAuthenticatorEstablishesTheCaller(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	secret := []byte("0123456789abcdef0123456789abcdef-hmac")
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edPublic, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	newAuth := func(jwtConf conf.JWT) *Authenticator {
		jwtConf.Issuer, jwtConf.Audience = "https://issuer.test", "txmanager"
		a, err := NewAuthenticator(conf.Auth{Enabled: true, APIKeys: apiKeys(), JWT: jwtConf})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	hmac := newAuth(conf.JWT{HMACSecretFile: writeFile(t, dir, "secret", append(secret, '\n'))})
	// Public keys with the claims renamed, as an identity provider may name them.
	named := conf.JWT{SignersClaim: "wallets", AdminClaim: "ops"}
	withRSA, withEC, withEd := named, named, named
	withRSA.PublicKeyFile = writeFile(t, dir, "rsa.pem", publicKeyPEM(t, &rsaKey.PublicKey))
	withEC.PublicKeyFile = writeFile(t, dir, "ec.pem", publicKeyPEM(t, &ecKey.PublicKey))
	withEd.PublicKeyFile = writeFile(t, dir, "ed.pem", publicKeyPEM(t, edPublic))
	rsaAuth, ecAuth, edAuth := newAuth(withRSA), newAuth(withEC), newAuth(withEd)
	keysOnly := newAuth(conf.JWT{})
	disabled, err := NewAuthenticator(conf.Auth{})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		auth *Authenticator
		ctx  context.Context
		// wantID is the principal established ("" when the call is refused); admin and
		// signerA what it may do.
		wantID      string
		wantAdmin   bool
		wantSignerA bool
		// wantNone: the call passes without a principal (a health check).
		wantNone bool
		wantWhy  string
	}{
		{name: "a client's API key", auth: hmac, ctx: callWith(withKey(clientKey)), wantID: "client", wantSignerA: true},
		{name: "an operator's API key", auth: hmac, ctx: callWith(withKey(adminKey)), wantID: "operator", wantAdmin: true, wantSignerA: true},
		{name: "a scraper's API key grants no signer", auth: hmac, ctx: callWith(withKey(metricsKey)), wantID: "scraper"},
		{name: "an unknown API key", auth: hmac, ctx: callWith(withKey("guess")), wantWhy: "unknown API key"},
		{name: "an API key wins over a bearer token", auth: hmac, ctx: callWith(map[string]string{"X-API-Key": "guess", "Authorization": "Bearer x"}), wantWhy: "unknown API key"},
		{name: "an HMAC token with a list of signers and admin", auth: hmac,
			ctx:    callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"signers": []any{signerA.Hex(), 7}, "txm_admin": true})))),
			wantID: "jwt:billing", wantAdmin: true, wantSignerA: true},
		{name: "an HMAC token with one signer", auth: hmac,
			ctx:    callWith(bearer(sign(t, jwt.SigningMethodHS512, secret, claims(jwt.MapClaims{"signers": strings.ToLower(signerA.Hex())})))),
			wantID: "jwt:billing", wantSignerA: true},
		{name: "a token granting every signer", auth: hmac,
			ctx:    callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"signers": []any{"*"}})))),
			wantID: "jwt:billing", wantSignerA: true},
		{name: "an expired token", auth: hmac,
			ctx:     callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"exp": time.Now().Add(-time.Hour).Unix()})))),
			wantWhy: "invalid bearer token"},
		{name: "a token without a subject: it would share one audit name and rate with every other", auth: hmac,
			ctx:     callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"sub": nil})))),
			wantWhy: "without a subject"},
		{name: "a token with an empty subject", auth: hmac,
			ctx:     callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"sub": ""})))),
			wantWhy: "without a subject"},
		{name: "a token without expiry", auth: hmac, ctx: callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"exp": nil})))),
			wantWhy: "invalid bearer token"},
		{name: "another issuer's token", auth: hmac, ctx: callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"iss": "https://evil.test"})))),
			wantWhy: "invalid bearer token"},
		{name: "a token for another audience", auth: hmac, ctx: callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"aud": "other"})))),
			wantWhy: "invalid bearer token"},
		{name: "a token signed with another secret", auth: hmac,
			ctx:     callWith(bearer(sign(t, jwt.SigningMethodHS256, []byte("another-secret-of-32-bytes-or-more!!"), claims(nil)))),
			wantWhy: "invalid bearer token"},
		{name: "an RSA token where HMAC is configured", auth: hmac, ctx: callWith(bearer(sign(t, jwt.SigningMethodRS256, rsaKey, claims(nil)))),
			wantWhy: "invalid bearer token"},
		{name: "a token granting a signer that does not parse", auth: hmac,
			ctx:     callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(jwt.MapClaims{"signers": "0x12"})))),
			wantWhy: "invalid bearer token"},
		{name: "an RSA token with renamed claims", auth: rsaAuth,
			ctx:    callWith(bearer(sign(t, jwt.SigningMethodRS256, rsaKey, claims(jwt.MapClaims{"wallets": signerA.Hex(), "ops": true, "txm_admin": false})))),
			wantID: "jwt:billing", wantAdmin: true, wantSignerA: true},
		{name: "the default claim names mean nothing when renamed", auth: rsaAuth,
			ctx:    callWith(bearer(sign(t, jwt.SigningMethodPS256, rsaKey, claims(jwt.MapClaims{"signers": signerA.Hex(), "txm_admin": true})))),
			wantID: "jwt:billing"},
		{name: "an ECDSA token", auth: ecAuth, ctx: callWith(bearer(sign(t, jwt.SigningMethodES256, ecKey, claims(jwt.MapClaims{"wallets": []any{signerA.Hex()}})))),
			wantID: "jwt:billing", wantSignerA: true},
		{name: "an Ed25519 token", auth: edAuth, ctx: callWith(bearer(sign(t, jwt.SigningMethodEdDSA, edKey, claims(jwt.MapClaims{"ops": true})))),
			wantID: "jwt:billing", wantAdmin: true},
		{name: "an RSA token where Ed25519 is configured", auth: edAuth, ctx: callWith(bearer(sign(t, jwt.SigningMethodRS256, rsaKey, claims(nil)))),
			wantWhy: "invalid bearer token"},
		{name: "a bearer token where no JWT is configured", auth: keysOnly, ctx: callWith(bearer(sign(t, jwt.SigningMethodHS256, secret, claims(nil)))),
			wantWhy: "credentials required"},
		{name: "no credentials", auth: hmac, ctx: callWith(nil), wantWhy: "credentials required"},
		{name: "a call outside any transport", auth: hmac, ctx: context.Background(), wantWhy: "no transport"},
		{name: "a gRPC health check needs none", auth: hmac,
			ctx:      transport.NewServerContext(context.Background(), opTransport{operation: "/grpc.health.v1.Health/Check"}),
			wantNone: true},
		{name: "authentication disabled: a development principal", auth: disabled, ctx: callWith(nil), wantID: "development (no authentication)", wantAdmin: true, wantSignerA: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, ok, err := authenticated(tt.auth, tt.ctx)
			switch {
			case tt.wantWhy != "":
				se := kerrors.FromError(err)
				if se.Code != http.StatusUnauthorized || se.Reason != "UNAUTHENTICATED" || !strings.Contains(se.Message, tt.wantWhy) {
					t.Fatalf("answered %v, want 401 UNAUTHENTICATED saying %q", err, tt.wantWhy)
				}
				return
			case err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantNone:
				if ok {
					t.Fatalf("a health check was given principal %+v", p)
				}
				return
			}
			if !ok || p.ID != tt.wantID || p.Admin != tt.wantAdmin || p.CanUse(signerA) != tt.wantSignerA {
				t.Fatalf("principal %+v (admin %t, signerA %t), want %s admin %t signerA %t", p, p.Admin, p.CanUse(signerA), tt.wantID, tt.wantAdmin, tt.wantSignerA)
			}
		})
	}
}

// A configuration the authenticator cannot use fails the start with an error naming the
// key to change, and never quoting a secret.
func TestAuthenticatorRefusesUnusableConfiguration(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	shortSecret := writeFile(t, dir, "short", []byte("too-short-secret"))
	longSecret := writeFile(t, dir, "long", []byte("0123456789abcdef0123456789abcdef"))
	notAKey := writeFile(t, dir, "cert.pem", []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"))
	missing := filepath.Join(dir, "missing")
	const leakedDigest = "sha256:zz11223344556677"
	tests := []struct {
		name string
		auth conf.Auth
		want string
	}{
		{"a digest that is not hex", conf.Auth{APIKeys: []conf.APIKey{{ID: "app", SHA256: leakedDigest}}}, "auth.apiKeys[0] (app): sha256 must be 64 hex digits"},
		{"a digest of the wrong length", conf.Auth{APIKeys: []conf.APIKey{{ID: "app", SHA256: "abcd"}}}, "auth.apiKeys[0] (app): sha256 must be 64 hex digits"},
		{"the same key twice", conf.Auth{APIKeys: []conf.APIKey{{ID: "a", SHA256: keyDigest("k")}, {ID: "b", SHA256: strings.ToUpper(keyDigest("k"))}}},
			"auth.apiKeys[1] (b): same key digest as a"},
		{"a granted signer that does not parse", conf.Auth{APIKeys: []conf.APIKey{{ID: "app", SHA256: keyDigest("k"), Signers: []string{"0x1234"}}}},
			"auth.apiKeys[0] (app): granted signer"},
		{"both JWT keys", conf.Auth{JWT: conf.JWT{HMACSecretFile: longSecret, PublicKeyFile: notAKey}}, "auth.jwt: set hmacSecretFile or publicKeyFile, not both"},
		{"a secret too short", conf.Auth{JWT: conf.JWT{HMACSecretFile: shortSecret}}, "auth.jwt.hmacSecretFile: the secret must be at least 32 bytes"},
		{"a secret file that is missing", conf.Auth{JWT: conf.JWT{HMACSecretFile: missing}}, "auth.jwt.hmacSecretFile"},
		{"a public key file that is missing", conf.Auth{JWT: conf.JWT{PublicKeyFile: missing}}, "auth.jwt.publicKeyFile"},
		{"a public key that is no key", conf.Auth{JWT: conf.JWT{PublicKeyFile: notAKey}}, "auth.jwt.publicKeyFile: not an RSA, ECDSA or Ed25519 public key in PEM"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.auth.Enabled = true
			_, err := NewAuthenticator(tt.auth)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "zz11223344556677") || strings.Contains(err.Error(), "too-short-secret") {
				t.Errorf("error %q quotes a secret", err)
			}
		})
	}
}
