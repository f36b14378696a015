package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	nethttp "net/http"
	"os"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/transport"
	"github.com/golang-jwt/jwt/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Authenticator establishes who a request comes from: an API key (X-API-Key, matched by
// its SHA-256) or a JWT (Authorization: Bearer). With authentication disabled every caller
// is a development principal with every grant (conf refuses that beyond loopback).
type Authenticator struct {
	enabled bool
	keys    map[[32]byte]domain.Principal
	jwt     *jwtVerifier
}

// rolesOf is the set of roles granted, keeping only those the deployment knows.
func rolesOf(granted []string, known map[string]bool) map[string]bool {
	out := map[string]bool{}
	for _, r := range granted {
		if known[r] {
			out[r] = true
		}
	}
	return out
}

// NewAuthenticator builds the authenticator from configuration. Secrets are read from
// files and kept only in memory; none appears in an error.
func NewAuthenticator(c conf.Auth) (*Authenticator, error) {
	a := &Authenticator{enabled: c.Enabled, keys: map[[32]byte]domain.Principal{}}
	if !a.enabled {
		return a, nil
	}
	known := map[string]bool{}
	for _, r := range c.Roles {
		known[r] = true
	}
	for i, k := range c.APIKeys {
		digest, err := hex.DecodeString(strings.TrimPrefix(strings.ToLower(k.SHA256), "sha256:"))
		if err != nil || len(digest) != sha256.Size {
			return nil, fmt.Errorf("auth.apiKeys[%d] (%s): sha256 must be 64 hex digits", i, k.ID)
		}
		p, err := principalOf(k.ID, k.Signers, k.Admin)
		if err != nil {
			return nil, fmt.Errorf("auth.apiKeys[%d] (%s): %w", i, k.ID, err)
		}
		p.Metrics = k.Metrics
		p.Roles = rolesOf(k.Roles, known)
		if other, taken := a.keys[[32]byte(digest)]; taken {
			return nil, fmt.Errorf("auth.apiKeys[%d] (%s): same key digest as %s", i, k.ID, other.ID)
		}
		a.keys[[32]byte(digest)] = p
	}
	if c.JWT.HMACSecretFile != "" || c.JWT.PublicKeyFile != "" {
		v, err := newJWTVerifier(c.JWT, known)
		if err != nil {
			return nil, err
		}
		a.jwt = v
	}
	return a, nil
}

func principalOf(id string, signers []string, admin bool) (domain.Principal, error) {
	p := domain.Principal{ID: id, Admin: admin, Signers: map[common.Address]bool{}}
	for _, s := range signers {
		if s == "*" {
			p.AllSigners = true
			continue
		}
		addr, err := domain.ParseAddress("signer", s)
		if err != nil {
			return p, fmt.Errorf("granted signer: %w", err)
		}
		p.Signers[addr] = true
	}
	return p, nil
}

// developer is the principal of every request when authentication is disabled.
func developer() domain.Principal {
	return domain.Principal{ID: "development (no authentication)", AllSigners: true, Admin: true}
}

// Middleware authenticates every API call (HTTP and gRPC alike) but gRPC health checks.
func (a *Authenticator) Middleware() middleware.Middleware {
	return func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req any) (any, error) {
			if tr, ok := transport.FromServerContext(ctx); ok && isHealthCheck(tr.Operation()) {
				return next(ctx, req)
			}
			p, err := a.authenticate(ctx)
			if err != nil {
				return nil, err
			}
			return next(domain.WithPrincipal(ctx, p), req)
		}
	}
}

func (a *Authenticator) authenticate(ctx context.Context) (domain.Principal, error) {
	if !a.enabled {
		return developer(), nil
	}
	tr, ok := transport.FromServerContext(ctx)
	if !ok {
		return domain.Principal{}, unauthenticated("no transport")
	}
	return a.fromHeaders(tr.RequestHeader().Get)
}

// fromHeaders authenticates the credentials in a request's headers.
func (a *Authenticator) fromHeaders(header func(string) string) (domain.Principal, error) {
	if !a.enabled {
		return developer(), nil
	}
	if key := header("x-api-key"); key != "" {
		if p, ok := a.keys[sha256.Sum256([]byte(key))]; ok {
			return p, nil
		}
		return domain.Principal{}, unauthenticated("unknown API key")
	}
	if bearer, ok := strings.CutPrefix(header("authorization"), "Bearer "); ok && a.jwt != nil {
		p, err := a.jwt.verify(bearer)
		if errors.Is(err, errNoSubject) {
			return domain.Principal{}, unauthenticated("bearer token without a subject (sub claim)")
		}
		if err != nil {
			return domain.Principal{}, unauthenticated("invalid bearer token")
		}
		return p, nil
	}
	return domain.Principal{}, unauthenticated("credentials required (X-API-Key or Authorization: Bearer)")
}

// isHealthCheck: a gRPC health check (grpc.health.v1.Health), which gRPC clients (Kratos'
// among them) send without the caller's credentials to decide whether a connection may
// carry calls; it tells nothing but "serving", so it needs none.
func isHealthCheck(operation string) bool {
	return strings.HasPrefix(operation, "/grpc.health.v1.Health/")
}

var errNoSubject = errors.New("token without a subject")

func unauthenticated(why string) error {
	return v1.ErrorUnauthenticated("%s", why)
}

// MetricsHandler guards /metrics when observability.metricsAuth is on: an API key with the
// metrics or admin grant, or an admin JWT. The key may also come as "Authorization: Bearer
// <key>", since a scraper (Prometheus, the operator's ServiceMonitor) can send a bearer
// token from a Secret but no custom header.
func (a *Authenticator) MetricsHandler(required bool, next nethttp.Handler) nethttp.Handler {
	if !required {
		return next
	}
	return nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		p, err := a.scraperFromHeaders(r.Header.Get)
		if err != nil {
			encodeError(w, r, err)
			return
		}
		if !p.CanReadMetrics() {
			encodeError(w, r, v1.ErrorPermissionDenied("this credential may not read metrics"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// scraperFromHeaders is fromHeaders that also takes an API key sent as a bearer token.
func (a *Authenticator) scraperFromHeaders(header func(string) string) (domain.Principal, error) {
	if a.enabled && header("x-api-key") == "" {
		if bearer, ok := strings.CutPrefix(header("authorization"), "Bearer "); ok {
			if p, ok := a.keys[sha256.Sum256([]byte(bearer))]; ok {
				return p, nil
			}
		}
	}
	return a.fromHeaders(header)
}

// jwtVerifier checks signature, expiry, issuer and audience, and reads the grants.
type jwtVerifier struct {
	key          any
	parser       *jwt.Parser // built once from the configuration, shared by every request
	signersClaim string
	adminClaim   string
	rolesClaim   string
	knownRoles   map[string]bool
}

func newJWTVerifier(c conf.JWT, knownRoles map[string]bool) (*jwtVerifier, error) {
	v := &jwtVerifier{signersClaim: c.SignersClaim, adminClaim: c.AdminClaim, rolesClaim: c.RolesClaim, knownRoles: knownRoles}
	if v.rolesClaim == "" {
		v.rolesClaim = "txm_roles"
	}
	if v.signersClaim == "" {
		v.signersClaim = "signers"
	}
	if v.adminClaim == "" {
		v.adminClaim = "txm_admin"
	}
	var methods []string
	switch {
	case c.HMACSecretFile != "" && c.PublicKeyFile != "":
		return nil, fmt.Errorf("auth.jwt: set hmacSecretFile or publicKeyFile, not both")
	case c.HMACSecretFile != "":
		secret, err := os.ReadFile(c.HMACSecretFile)
		if err != nil {
			return nil, fmt.Errorf("auth.jwt.hmacSecretFile: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(secret)))
		if len(secret) < 32 {
			return nil, fmt.Errorf("auth.jwt.hmacSecretFile: the secret must be at least 32 bytes")
		}
		v.key, methods = secret, []string{"HS256", "HS384", "HS512"}
	default:
		pem, err := os.ReadFile(c.PublicKeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth.jwt.publicKeyFile: %w", err)
		}
		if key, err := jwt.ParseRSAPublicKeyFromPEM(pem); err == nil {
			v.key, methods = key, []string{"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"}
		} else if key, err := jwt.ParseECPublicKeyFromPEM(pem); err == nil {
			v.key, methods = key, []string{"ES256", "ES384", "ES512"}
		} else if key, err := jwt.ParseEdPublicKeyFromPEM(pem); err == nil {
			v.key, methods = key, []string{"EdDSA"}
		} else {
			return nil, fmt.Errorf("auth.jwt.publicKeyFile: not an RSA, ECDSA or Ed25519 public key in PEM")
		}
	}
	opts := []jwt.ParserOption{jwt.WithValidMethods(methods), jwt.WithExpirationRequired(), jwt.WithLeeway(30 * time.Second)}
	if c.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(c.Issuer))
	}
	if c.Audience != "" {
		opts = append(opts, jwt.WithAudience(c.Audience))
	}
	v.parser = jwt.NewParser(opts...)
	return v, nil
}

func (v *jwtVerifier) verify(token string) (domain.Principal, error) {
	claims := jwt.MapClaims{}
	if _, err := v.parser.ParseWithClaims(token, claims, v.keyFor); err != nil {
		return domain.Principal{}, err
	}
	subject, _ := claims.GetSubject()
	if subject == "" {
		// The subject names the caller in the audit trail and keys its rate limit: tokens
		// without one would all be one caller.
		return domain.Principal{}, errNoSubject
	}
	var signers []string
	switch raw := claims[v.signersClaim].(type) {
	case string:
		signers = []string{raw}
	case []any:
		for _, s := range raw {
			if str, ok := s.(string); ok {
				signers = append(signers, str)
			}
		}
	}
	admin, _ := claims[v.adminClaim].(bool)
	p, err := principalOf("jwt:"+subject, signers, admin)
	if err != nil {
		return p, err
	}
	p.Roles = rolesOf(stringsOf(claims[v.rolesClaim]), v.knownRoles)
	if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
		p.ExpiresAt = exp.Time
	}
	return p, nil
}

// stringsOf reads a claim that is one string or a list of strings.
func stringsOf(claim any) []string {
	switch raw := claim.(type) {
	case string:
		return []string{raw}
	case []any:
		var out []string
		for _, s := range raw {
			if str, ok := s.(string); ok {
				out = append(out, str)
			}
		}
		return out
	}
	return nil
}

// keyFor is the verification key; the parser has already checked the token's algorithm.
func (v *jwtVerifier) keyFor(*jwt.Token) (any, error) { return v.key, nil }
