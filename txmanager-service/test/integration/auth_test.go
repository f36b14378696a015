package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

const (
	clientKey = "client-key-9b1d7c3e55a04f6b8e2d"
	adminKey  = "admin-key-4e8a2f61c9d7b3a05e17"
	scrapeKey = "scrape-key-7c2e9a41f0b35d86e1a4"
	// scopedAdminKey has the admin grant for the first development signer alone.
	scopedAdminKey = "scoped-admin-key-2d7f9e04b6a1c835"
	jwtSecret      = "jwt-secret-for-tests-0123456789abcdef0123"
)

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// startAuthedService runs the service with API keys and a JWT secret: the client key may
// use signer 0 only, the admin key every signer and the admin API, the scrape key /metrics
// alone (metrics require credentials).
func startAuthedService(t *testing.T) *testService {
	t.Helper()
	secretFile := filepath.Join(t.TempDir(), "jwt.secret")
	if err := os.WriteFile(secretFile, []byte(jwtSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return startService(t, serviceOptions{configure: func(bc *conf.Bootstrap) {
		bc.Auth = conf.Auth{
			Enabled: true,
			APIKeys: []conf.APIKey{
				{ID: "client", SHA256: sha256Hex(clientKey), Signers: []string{devAddress(t, 0)}},
				{ID: "ops", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true},
				{ID: "prometheus", SHA256: sha256Hex(scrapeKey), Metrics: true},
				{ID: "ops-dev0", SHA256: sha256Hex(scopedAdminKey), Signers: []string{devAddress(t, 0)}, Admin: true},
			},
			JWT: conf.JWT{HMACSecretFile: secretFile, Issuer: "tests", Audience: "txmanager", SignersClaim: "signers", AdminClaim: "txm_admin"},
		}
		bc.Observability.MetricsAuth = true
	}})
}

func signToken(t *testing.T, claims jwt.MapClaims, secret string) string {
	t.Helper()
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// Issue 6: no credentials -> 401, credentials for another signer -> 403, admin endpoints
// without the admin permission -> 403; over HTTP and gRPC.
func TestAuthenticationAndAuthorisation(t *testing.T) {
	t.Parallel()
	s := startAuthedService(t)
	mine, other, to := devAddress(t, 0), devAddress(t, 1), devAddress(t, 9)
	create := func(signer, requestID string) []byte {
		return []byte(`{"signer":"` + signer + `","to":"` + to + `","value":"1","gasLimit":21000,"requestId":"` + requestID + `"}`)
	}
	// The admin key creates a transaction for the other signer, to read it back later.
	othersTx := s.doAs(t, http.MethodPost, "/api/v1/tx", create(other, "admin-1"), "X-API-Key", adminKey)
	if othersTx.status != http.StatusAccepted {
		t.Fatalf("admin create: %d %s", othersTx.status, othersTx.raw)
	}
	othersID := othersTx.tx()["txId"].(string)
	valid := jwt.MapClaims{"sub": "svc-a", "iss": "tests", "aud": "txmanager", "exp": time.Now().Add(time.Hour).Unix(), "signers": []string{mine}}
	expired := jwt.MapClaims{"sub": "svc-a", "iss": "tests", "aud": "txmanager", "exp": time.Now().Add(-time.Hour).Unix(), "signers": []string{mine}}

	tests := []struct {
		name          string
		method, path  string
		body          []byte
		header, value string
		wantStatus    int
		wantReason    string
	}{
		{"create without credentials", http.MethodPost, "/api/v1/tx", create(mine, "a"), "", "", 401, "UNAUTHENTICATED"},
		{"read without credentials", http.MethodGet, "/api/v1/tx/" + othersID, nil, "", "", 401, "UNAUTHENTICATED"},
		{"feed without credentials", http.MethodGet, "/api/v1/tx/completions", nil, "", "", 401, "UNAUTHENTICATED"},
		{"admin without credentials", http.MethodGet, "/api/v1/admin/nodes", nil, "", "", 401, "UNAUTHENTICATED"},
		{"unknown API key", http.MethodPost, "/api/v1/tx", create(mine, "b"), "X-API-Key", "not-a-key", 401, "UNAUTHENTICATED"},
		{"create for my signer", http.MethodPost, "/api/v1/tx", create(mine, "c"), "X-API-Key", clientKey, 202, ""},
		{"create for another signer", http.MethodPost, "/api/v1/tx", create(other, "d"), "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"read another signer's tx", http.MethodGet, "/api/v1/tx/" + othersID, nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"by-request for another signer", http.MethodGet, "/api/v1/tx/by-request?signer=" + other + "&requestId=admin-1", nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"admin nodes without admin", http.MethodGet, "/api/v1/admin/nodes", nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"admin signer status without admin", http.MethodGet, "/api/v1/admin/signers/" + mine, nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"admin stuck list without admin", http.MethodGet, "/api/v1/admin/stuck", nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"admin resolve without admin", http.MethodPost, "/api/v1/admin/tx/" + othersID + "/resolve", []byte(`{"action":"NOOP"}`), "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"admin nodes as admin", http.MethodGet, "/api/v1/admin/nodes", nil, "X-API-Key", adminKey, 200, ""},
		{"admin signer status as admin", http.MethodGet, "/api/v1/admin/signers/" + other, nil, "X-API-Key", adminKey, 200, ""},
		{"valid JWT for my signer", http.MethodPost, "/api/v1/tx", create(mine, "e"), "Authorization", "Bearer " + signToken(t, valid, jwtSecret), 202, ""},
		{"valid JWT, another signer", http.MethodPost, "/api/v1/tx", create(other, "f"), "Authorization", "Bearer " + signToken(t, valid, jwtSecret), 403, "PERMISSION_DENIED"},
		{"expired JWT", http.MethodPost, "/api/v1/tx", create(mine, "g"), "Authorization", "Bearer " + signToken(t, expired, jwtSecret), 401, "UNAUTHENTICATED"},
		{"JWT signed with another key", http.MethodPost, "/api/v1/tx", create(mine, "h"), "Authorization", "Bearer " + signToken(t, valid, "some-other-secret-of-enough-length-000"), 401, "UNAUTHENTICATED"},
		{"metrics without credentials", http.MethodGet, "/metrics", nil, "", "", 401, "UNAUTHENTICATED"},
		{"metrics with a client key", http.MethodGet, "/metrics", nil, "X-API-Key", clientKey, 403, "PERMISSION_DENIED"},
		{"metrics with the scrape key", http.MethodGet, "/metrics", nil, "X-API-Key", scrapeKey, 200, ""},
		{"metrics with the admin key", http.MethodGet, "/metrics", nil, "X-API-Key", adminKey, 200, ""},
		{"metrics with the scrape key as a bearer token", http.MethodGet, "/metrics", nil, "Authorization", "Bearer " + scrapeKey, 200, ""},
		{"metrics with a client key as a bearer token", http.MethodGet, "/metrics", nil, "Authorization", "Bearer " + clientKey, 403, "PERMISSION_DENIED"},
		{"metrics with an unknown bearer token", http.MethodGet, "/metrics", nil, "Authorization", "Bearer not-a-key", 401, "UNAUTHENTICATED"},
		{"the scrape key as a bearer token is no API credential", http.MethodGet, "/api/v1/admin/nodes", nil, "Authorization", "Bearer " + scrapeKey, 401, "UNAUTHENTICATED"},
		{"admin API with the scrape key", http.MethodGet, "/api/v1/admin/nodes", nil, "X-API-Key", scrapeKey, 403, "PERMISSION_DENIED"},
		{"create with the scrape key", http.MethodPost, "/api/v1/tx", create(mine, "j"), "X-API-Key", scrapeKey, 403, "PERMISSION_DENIED"},
		// An admin grant limited to some signers acts on, and sees, those alone.
		{"scoped admin: its signer's status", http.MethodGet, "/api/v1/admin/signers/" + mine, nil, "X-API-Key", scopedAdminKey, 200, ""},
		{"scoped admin: another signer's status", http.MethodGet, "/api/v1/admin/signers/" + other, nil, "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: pause another signer", http.MethodPost, "/api/v1/admin/roster/" + other + "/pause", []byte(`{"note":"x"}`), "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: retire another signer", http.MethodPost, "/api/v1/admin/roster/" + other + "/retire", []byte(`{"note":"x"}`), "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: release another signer", http.MethodPost, "/api/v1/admin/signers/" + other + "/release", []byte(`{"note":"x"}`), "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: another signer's quarantine", http.MethodGet, "/api/v1/admin/signers/" + other + "/quarantine", nil, "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: another signer's stuck list", http.MethodGet, "/api/v1/admin/stuck?signer=" + other, nil, "X-API-Key", scopedAdminKey, 403, "PERMISSION_DENIED"},
		{"scoped admin: resolve another signer's tx", http.MethodPost, "/api/v1/admin/tx/" + othersID + "/resolve", []byte(`{"action":"NOOP","reason":"x"}`), "X-API-Key", scopedAdminKey, 404, "NOT_FOUND"},
		{"JWT alg none", http.MethodPost, "/api/v1/tx", create(mine, "i"), "Authorization", "Bearer eyJhbGciOiJub25lIn0." + "eyJzdWIiOiJ4In0.", 401, "UNAUTHENTICATED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := s.doAs(t, tc.method, tc.path, tc.body, tc.header, tc.value)
			if got.status != tc.wantStatus || (tc.wantReason != "" && got.reason() != tc.wantReason) {
				t.Fatalf("got %d %s, want %d %s", got.status, got.raw, tc.wantStatus, tc.wantReason)
			}
		})
	}

	// The lists show a scoped admin its own signers only.
	for _, path := range []string{"/api/v1/admin/signers", "/api/v1/admin/roster"} {
		list := s.doAs(t, http.MethodGet, path, nil, "X-API-Key", scopedAdminKey)
		if list.status != http.StatusOK || !strings.Contains(strings.ToLower(list.raw), strings.ToLower(mine)) || strings.Contains(strings.ToLower(list.raw), strings.ToLower(other)) {
			t.Fatalf("%s as the scoped admin: %d %s; want %s listed and not %s", path, list.status, list.raw, mine, other)
		}
	}

	// The feed shows a client its own signers only.
	feed := s.doAs(t, http.MethodGet, "/api/v1/tx/completions", nil, "X-API-Key", clientKey)
	if feed.status != http.StatusOK {
		t.Fatalf("feed: %d %s", feed.status, feed.raw)
	}

	// gRPC says the same with status codes.
	ctx := t.Context()
	if _, err := s.grpc.CreateTx(ctx, &v1.CreateTxRequest{Signer: mine, To: to, Value: "1", GasLimit: 21000}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("gRPC without credentials: %v, want Unauthenticated", err)
	}
	withKey := metadata.AppendToOutgoingContext(ctx, "x-api-key", clientKey)
	if _, err := s.grpc.CreateTx(withKey, &v1.CreateTxRequest{Signer: other, To: to, Value: "1", GasLimit: 21000}); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("gRPC for another signer: %v, want PermissionDenied", err)
	}
	if resp, err := s.grpc.CreateTx(withKey, &v1.CreateTxRequest{Signer: mine, To: to, Value: "2", GasLimit: 21000}); err != nil || !resp.GetCreated() {
		t.Fatalf("gRPC for my signer: %v", err)
	}
}

func TestUnauthenticatedServiceRefusesToListenBeyondLoopback(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, addr := range []string{"0.0.0.0:0", ":8080", "10.1.2.3:8080"} {
		path := filepath.Join(dir, "config.yaml")
		if err := os.WriteFile(path, []byte("server:\n  http:\n    addr: \""+addr+"\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := conf.Load(path); err == nil || !strings.Contains(err.Error(), "without authentication") {
			t.Fatalf("listen on %s without auth: err = %v, want a refusal", addr, err)
		}
	}
}
