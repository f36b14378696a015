package console

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestSessionCookies(t *testing.T) {
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("s", 40)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	shortFile := filepath.Join(t.TempDir(), "short")
	if err := os.WriteFile(shortFile, []byte("too short"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newSealer(shortFile, time.Hour, 0); err == nil || !strings.Contains(err.Error(), "at least 32 bytes") {
		t.Fatalf("a short secret: %v, want refused", err)
	}
	if _, err := newSealer(filepath.Join(t.TempDir(), "missing"), time.Hour, 0); err == nil {
		t.Fatal("a missing secret file was accepted")
	}
	node1, err := newSealer(secretFile, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	node2, _ := newSealer(secretFile, time.Hour, 0)
	stranger, _ := newSealer("", time.Hour, 0)
	sess, cookie, err := node1.open(credentialAPIKey, "the-key")
	if err != nil {
		t.Fatal(err)
	}
	later := node1.now().Add(2 * time.Hour)
	expired := &sealer{aead: node1.aead, csrfKey: node1.csrfKey, ttl: time.Hour, now: func() time.Time { return later }}
	tampered := []byte(cookie)
	tampered[len(tampered)/2] ^= 1
	tests := []struct {
		name   string
		sealer *sealer
		cookie string
		ok     bool
	}{
		{"the node that sealed it", node1, cookie, true},
		{"another node with the same secret", node2, cookie, true},
		{"a node with another secret", stranger, cookie, false},
		{"a changed cookie", node1, string(tampered), false},
		{"after its lifetime", expired, cookie, false},
		{"not base64", node1, "%%%", false},
		{"empty", node1, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.sealer.read(tc.cookie)
			if tc.ok != (err == nil) {
				t.Fatalf("read: %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && (got.ID != sess.ID || got.Credential != "the-key" || got.Kind != credentialAPIKey) {
				t.Fatalf("read %+v, want %+v", got, sess)
			}
		})
	}
	if strings.Contains(cookie, "the-key") {
		t.Fatal("the cookie shows the credential")
	}
	token := node1.csrfToken(sess.ID)
	other, _, _ := node1.open(credentialAPIKey, "the-key")
	for _, tc := range []struct {
		name, session, token string
		ok                   bool
	}{
		{"its own token", sess.ID, token, true},
		{"the same token on another node", sess.ID, node2.csrfToken(sess.ID), true},
		{"no token", sess.ID, "", false},
		{"another session's token", sess.ID, node1.csrfToken(other.ID), false},
		{"a token of another secret", sess.ID, stranger.csrfToken(sess.ID), false},
	} {
		if got := node1.validCSRF(tc.session, tc.token); got != tc.ok {
			t.Errorf("%s: valid=%v, want %v", tc.name, got, tc.ok)
		}
	}
}

func TestSignInHelpers(t *testing.T) {
	for _, tc := range []struct{ next, want string }{
		{"/console/tx/1", "/console/tx/1"},
		{"/console", "/console"},
		{"", "/console"},
		{"https://evil.example/console", "/console"},
		{"//evil.example/console", "/console"},
		{"/console\r\nSet-Cookie: x", "/console"},
		{"/api/v1/tx", "/console"},
	} {
		if got := safeNext(tc.next); got != tc.want {
			t.Errorf("safeNext(%q) = %q, want %q", tc.next, got, tc.want)
		}
	}
	for _, tc := range []struct {
		credential string
		jwt        bool
	}{
		{"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhIn0.c2ln", true},
		{"a-plain-api-key", false},
		{"eyJ-no-dots", false},
	} {
		if got := looksLikeJWT(tc.credential); got != tc.jwt {
			t.Errorf("looksLikeJWT(%q) = %v", tc.credential, got)
		}
	}
	for _, tc := range []struct {
		err  error
		want int
	}{
		{domain.ErrNotFound, 404},
		{&domain.ValidationError{Field: "signer", Reason: "bad"}, 400},
		{errForbidden, 403},
		{errors.New("failed to connect to `host=db-primary.internal user=txm_rw`: dial tcp 10.0.3.7:5432: refused"), 503},
	} {
		c := &Console{log: log.NewHelper(log.NewStdLogger(io.Discard))}
		got, message := c.statusOf(httptest.NewRequest(http.MethodGet, "/console/search", nil), tc.err)
		if got != tc.want {
			t.Errorf("statusOf(%v) = %d, want %d", tc.err, got, tc.want)
		}
		// The cause of a failure to read goes to the log, not to the page: it may name
		// the database's host or a statement.
		if got == 503 && (strings.Contains(message, "db-primary") || strings.Contains(message, "5432")) {
			t.Errorf("a failure to read shows its cause: %q", message)
		}
	}
}

func TestFeeChart(t *testing.T) {
	gwei := func(n int64) *big.Int { return big.NewInt(n * 1_000_000_000) }
	tests := []struct {
		name                  string
		attempts              []services.Attempt
		paid                  *big.Int
		wantMax, wantBaseLine bool
		wantPoints            int
	}{
		{"none", nil, nil, false, false, 0},
		{"one attempt", []services.Attempt{{MaxFee: gwei(30), MaxTip: gwei(2), BaseFee: gwei(14)}}, gwei(16), false, false, 3},
		{"a bump", []services.Attempt{{MaxFee: gwei(30), MaxTip: gwei(2), BaseFee: gwei(14)}, {MaxFee: gwei(60), MaxTip: gwei(3), BaseFee: gwei(29)}}, gwei(31), true, true, 6},
		{"base fee not known", []services.Attempt{{MaxFee: gwei(30), MaxTip: gwei(2)}, {MaxFee: gwei(40), MaxTip: gwei(3)}}, nil, true, false, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svg := string(feeChart(tc.attempts, tc.paid))
			if len(tc.attempts) == 0 {
				if svg != "" {
					t.Fatalf("a chart without attempts: %s", svg)
				}
				return
			}
			if got := strings.Contains(svg, `class="series-max"/>`); got != tc.wantMax {
				t.Errorf("max-fee line drawn: %v, want %v", got, tc.wantMax)
			}
			if got := strings.Contains(svg, `polyline points=`) && strings.Contains(svg, `class="series-base"/>`); got != tc.wantBaseLine {
				t.Errorf("base-fee line drawn: %v, want %v", got, tc.wantBaseLine)
			}
			if got := strings.Count(svg, "<circle"); got != tc.wantPoints {
				t.Errorf("%d points, want %d", got, tc.wantPoints)
			}
			if got := strings.Contains(svg, "paid "); got != (tc.paid != nil) {
				t.Errorf("paid line drawn: %v", got)
			}
		})
	}
}

func TestAmounts(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{gwei(big.NewInt(1_500_000_000)), "1.50 gwei"},
		{gwei(big.NewInt(250_000_000_000)), "250 gwei"},
		{gwei(big.NewInt(7)), "7 wei"},
		{gwei(nil), "—"},
		{ether(big.NewInt(1_000_000_000_000_000_000)), "1 ETH"},
		{ether(big.NewInt(1_234_500_000_000_000)), "0.001235 ETH"},
		{ether(big.NewInt(42)), "42 wei"},
		{ether(nil), "—"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestBadges(t *testing.T) {
	failing := time.Now()
	for _, tc := range []struct {
		name string
		view signerView
		want []string
	}{
		{"serving", signerView{SignerStatus: services.SignerStatus{LeaseLive: true}}, []string{"serving"}},
		{"quarantined", signerView{SignerStatus: services.SignerStatus{LeaseLive: true, Quarantined: true}}, []string{"quarantined"}},
		{"recovering", signerView{SignerStatus: services.SignerStatus{LeaseLive: true, Quarantined: true}, Recovering: true}, []string{"recovering"}},
		{"paused with stuck", signerView{SignerStatus: services.SignerStatus{LeaseLive: true, StuckCount: 2}, Paused: true}, []string{"2 stuck", "paused"}},
		{"cannot sign, no lease", signerView{SignerStatus: services.SignerStatus{Condition: services.SignerCondition{SigningFailingSince: &failing}}}, []string{"cannot sign", "no live lease"}},
		{"retiring", signerView{SignerStatus: services.SignerStatus{LeaseLive: true}, Roster: "retiring"}, []string{"retiring"}},
	} {
		var got []string
		for _, b := range badgesOf(tc.view) {
			got = append(got, b.Text)
		}
		if strings.Join(got, ",") != strings.Join(tc.want, ",") {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestEveryPageParses(t *testing.T) {
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range pageNames {
		if pages[name] == nil || pages[name].Lookup("content") == nil || pages[name].Lookup("title") == nil {
			t.Errorf("page %s lacks its content or title", name)
		}
	}
}

// testConsole is a console with its pages and a session sealer, and nothing behind it.
func testConsole(t *testing.T) *Console {
	t.Helper()
	secretFile := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secretFile, []byte(strings.Repeat("s", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	seal, err := newSealer(secretFile, time.Hour, 0)
	if err != nil {
		t.Fatal(err)
	}
	pages, err := parsePages()
	if err != nil {
		t.Fatal(err)
	}
	return &Console{enabled: true, authEnabled: true, seal: seal, pages: pages, log: log.NewHelper(log.NewStdLogger(io.Discard))}
}

// A page of a credential past its rate limit is answered 429 with its wait, not sent to
// sign in again; a credential too large for a browser cookie is refused at sign-in with the
// reason, not accepted into a cookie the browser drops.
func TestConsoleEdges(t *testing.T) {
	c := testConsole(t)
	t.Run("rate limited", func(t *testing.T) {
		_, sealed, err := c.seal.open(credentialAPIKey, "key")
		if err != nil {
			t.Fatal(err)
		}
		limited := func(func(string) string) (domain.Principal, error) {
			return domain.Principal{}, &RateLimitedError{RetryAfterSeconds: 7}
		}
		r := httptest.NewRequest(http.MethodGet, "/console", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: sealed})
		w := httptest.NewRecorder()
		c.Handler(limited).ServeHTTP(w, r)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "7" {
			t.Fatalf("%d Retry-After %q, want 429 after 7 s", w.Code, w.Header().Get("Retry-After"))
		}
	})
	t.Run("a message in a link is shown only when this console signed it for the session", func(t *testing.T) {
		v := viewer{session: session{ID: "session-1"}}
		signed := c.withFlash(v, "/console/signers/1/0xaa", "done", "Released 0xaa.")
		tests := []struct {
			name, url, want string
		}{
			{"signed after an action", signed, "Released 0xaa."},
			{"written into a link", "/console?done=" + url.QueryEscape("Session expired, sign in at https://evil.example"), ""},
			{"signed for another session", c.withFlash(viewer{session: session{ID: "session-2"}}, "/console", "done", "Released 0xaa."), ""},
		}
		for _, tt := range tests {
			if got := c.flash(httptest.NewRequest(http.MethodGet, tt.url, nil), v, "done"); got != tt.want {
				t.Errorf("%s: flash %q, want %q", tt.name, got, tt.want)
			}
		}
	})
	t.Run("a credential too large for a cookie", func(t *testing.T) {
		accept := func(func(string) string) (domain.Principal, error) { return domain.Principal{ID: "jwt:big"}, nil }
		token := "eyJhbGciOiJSUzI1NiJ9." + strings.Repeat("e", 3200) + ".c2ln"
		form := url.Values{"csrf": {"login-token"}, "credential": {token}}
		r := httptest.NewRequest(http.MethodPost, "/console/login", strings.NewReader(form.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(&http.Cookie{Name: loginCookie, Value: "login-token"})
		w := httptest.NewRecorder()
		c.Handler(accept).ServeHTTP(w, r)
		for _, set := range w.Result().Cookies() {
			if set.Name == sessionCookie && set.Value != "" {
				t.Fatalf("a session cookie of %d bytes was set", len(set.String()))
			}
		}
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "too large for a browser session") {
			t.Fatalf("%d, want 413 saying why:\n%.300s", w.Code, w.Body.String())
		}
	})
}

// signedOutList is the console's store as far as the signed-out list goes: it counts the
// look-ups, and answers them from ended, or with failure.
type signedOutList struct {
	services.ConsoleStore
	lookUps int
	ended   map[string]bool
	failure error
}

func (l *signedOutList) SessionEnded(_ context.Context, id string) (bool, error) {
	l.lookUps++
	return l.ended[id], l.failure
}

// A session is looked up in the signed-out list after its credential and rate limit (a
// signed-out cookie of a throttled credential costs the database nothing), once while it is
// open on every page, and not again once this node saw it ended. A list that cannot be read
// answers 503, never the page.
func TestSessionsAreCheckedAgainstTheSignedOutList(t *testing.T) {
	c := testConsole(t)
	list := &signedOutList{ended: map[string]bool{}}
	c.store = list
	sess, sealed, err := c.seal.open(credentialAPIKey, "key")
	if err != nil {
		t.Fatal(err)
	}
	get := func(auth Authenticate) int {
		r := httptest.NewRequest(http.MethodGet, "/console/stuck", nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: sealed})
		w := httptest.NewRecorder()
		c.Handler(auth).ServeHTTP(w, r)
		return w.Code
	}
	limited := func(func(string) string) (domain.Principal, error) {
		return domain.Principal{}, &RateLimitedError{RetryAfterSeconds: 1}
	}
	refused := func(func(string) string) (domain.Principal, error) {
		return domain.Principal{}, errors.New("unknown key")
	}
	steps := []struct {
		name        string
		auth        Authenticate
		ended       bool
		failure     error
		wantStatus  int
		wantLookUps int
	}{
		{name: "a throttled credential: 429 before the list", auth: limited, wantStatus: http.StatusTooManyRequests},
		{name: "a refused credential: sent to sign in before the list", auth: refused, wantStatus: http.StatusSeeOther},
		{name: "the list cannot be read: 503", auth: nil, failure: errors.New("connection refused"), wantStatus: http.StatusServiceUnavailable, wantLookUps: 1},
		{name: "signed out on another node: sent to sign in", auth: nil, ended: true, wantStatus: http.StatusSeeOther, wantLookUps: 2},
		{name: "seen ended here: not looked up again", auth: nil, ended: true, wantStatus: http.StatusSeeOther, wantLookUps: 2},
	}
	for _, step := range steps {
		list.ended[sess.ID], list.failure = step.ended, step.failure
		auth := step.auth
		if auth == nil {
			auth = func(func(string) string) (domain.Principal, error) { return domain.Principal{ID: "key:ops"}, nil }
		}
		if status := get(auth); status != step.wantStatus || list.lookUps != step.wantLookUps {
			t.Fatalf("%s: %d after %d look-ups, want %d after %d", step.name, status, list.lookUps, step.wantStatus, step.wantLookUps)
		}
	}
}

// Every console answer forbids framing and sniffing; one reached over TLS (directly or
// through a proxy that says so) also tells the browser never to use plain HTTP for it.
func TestSecurityHeaders(t *testing.T) {
	tests := []struct {
		name     string
		tls      bool
		header   string
		wantHSTS bool
	}{
		{"plain HTTP", false, "", false},
		{"TLS", true, "", true},
		{"behind a TLS proxy", false, "https", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/console", nil)
			if tc.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if tc.header != "" {
				r.Header.Set("X-Forwarded-Proto", tc.header)
			}
			w := httptest.NewRecorder()
			securityHeaders(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})).ServeHTTP(w, r)
			h := w.Result().Header
			if h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
				t.Fatalf("headers %v: want framing and sniffing forbidden", h)
			}
			if got := h.Get("Strict-Transport-Security") != ""; got != tc.wantHSTS {
				t.Fatalf("Strict-Transport-Security %q, want set %v", h.Get("Strict-Transport-Security"), tc.wantHSTS)
			}
		})
	}
}

// sessionsOnly is a console store that keeps only the sessions signed out.
type sessionsOnly struct {
	services.ConsoleStore
	ended map[string]bool
}

func (s sessionsOnly) SessionEnded(_ context.Context, id string) (bool, error) {
	return s.ended[id], nil
}

func (s sessionsOnly) EndSession(_ context.Context, id string, _ time.Time) error {
	s.ended[id] = true
	return nil
}

// A session not used for the idle timeout ends before its lifetime; a page the operator
// asks for keeps it going (its cookie sealed again), the live feed an open page polls by
// itself does not.
func TestSessionsEndWhenIdle(t *testing.T) {
	c := testConsole(t)
	store := sessionsOnly{ended: map[string]bool{}}
	c.store = store
	start := time.Now()
	now := start
	c.seal.idle, c.seal.ttl, c.seal.now = 30*time.Minute, 8*time.Hour, func() time.Time { return now }
	_, first, err := c.seal.open(credentialAPIKey, "key")
	if err != nil {
		t.Fatal(err)
	}
	accept := func(func(string) string) (domain.Principal, error) { return domain.Principal{ID: "ops"}, nil }
	request := func(at time.Duration, path, cookie string) (status int, renewed string) {
		now = start.Add(at)
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.AddCookie(&http.Cookie{Name: sessionCookie, Value: cookie})
		w := httptest.NewRecorder()
		c.withViewer(w, r, accept, func(w http.ResponseWriter, _ *http.Request, _ viewer) { w.WriteHeader(http.StatusOK) })
		for _, set := range w.Result().Cookies() {
			if set.Name == sessionCookie {
				renewed = set.Value
			}
		}
		return w.Code, renewed
	}
	if status, renewed := request(20*time.Minute, "/console/live", first); status != http.StatusOK || renewed != "" {
		t.Fatalf("the live feed after 20 minutes: %d, cookie renewed %v; want 200, not renewed", status, renewed != "")
	}
	status, second := request(29*time.Minute, "/console/signers", first)
	if status != http.StatusOK || second == "" {
		t.Fatalf("a page after 29 minutes: %d, cookie renewed %v; want 200 and a renewed cookie", status, second != "")
	}
	// A cookie sealed before sessions kept their last use: used now, stamped now.
	sess, _, err := c.seal.open(credentialAPIKey, "key")
	if err != nil {
		t.Fatal(err)
	}
	sess.Seen = 0
	unstamped, err := c.seal.seal(sess)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		at     time.Duration
		cookie string
		want   int
	}{
		{"the first cookie, 30 minutes after its last use (the live feed is no use)", 31 * time.Minute, first, http.StatusSeeOther},
		{"the renewed cookie, 2 minutes after its use", 31 * time.Minute, second, http.StatusOK},
		{"the renewed cookie, 30 minutes after its use", 59*time.Minute + time.Second, second, http.StatusSeeOther},
		{"a cookie without its last use, 7 hours after sign-in", 7 * time.Hour, unstamped, http.StatusOK},
	} {
		if status, _ := request(tc.at, "/console", tc.cookie); status != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, status, tc.want)
		}
	}
	// The live feed stamps such a cookie too, once: a dashboard left open across the
	// upgrade then ends idle like any other.
	if _, stamped := request(7*time.Hour, "/console/live", unstamped); stamped == "" {
		t.Fatal("the live feed did not stamp a cookie without its last use")
	}

	// Sent to sign in again, the operator is told why.
	now = start.Add(31 * time.Minute)
	r := httptest.NewRequest(http.MethodGet, "/console", nil)
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: first})
	w := httptest.NewRecorder()
	c.Handler(accept).ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther || !strings.Contains(w.Header().Get("Location"), "ended=idle") {
		t.Fatalf("a page of an idle session: %d to %q, want 303 to sign in, saying it ended idle", w.Code, w.Header().Get("Location"))
	}
	w = httptest.NewRecorder()
	c.Handler(accept).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/console/login?ended=idle", nil))
	if !strings.Contains(w.Body.String(), "ended after 30m0s without use") {
		t.Fatalf("the sign-in page after an idle session: %d, does not say why", w.Code)
	}

	// An idle session can still be signed out, so that no copy of its cookie opens again
	// where the idle timeout is longer; a sign-out refused (no form token) hands it no
	// fresh cookie.
	idle, err := c.seal.read(first)
	if !errors.Is(err, errIdle) {
		t.Fatalf("reading the first cookie: %v, want it idle", err)
	}
	r = httptest.NewRequest(http.MethodPost, "/console/logout", strings.NewReader(""))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: first})
	w = httptest.NewRecorder()
	c.Handler(accept).ServeHTTP(w, r)
	for _, set := range w.Result().Cookies() {
		if set.Name == sessionCookie && set.Value != "" {
			t.Fatalf("a refused sign-out of an idle session (%d) handed it a fresh cookie", w.Code)
		}
	}
	if status, _ := request(31*time.Minute, "/console", first); status != http.StatusSeeOther {
		t.Fatalf("the idle session after a refused sign-out: %d, want it still idle (303)", status)
	}
	form := url.Values{"csrf": {c.seal.csrfToken(idle.ID)}}
	r = httptest.NewRequest(http.MethodPost, "/console/logout", strings.NewReader(form.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.AddCookie(&http.Cookie{Name: sessionCookie, Value: first})
	w = httptest.NewRecorder()
	c.Handler(accept).ServeHTTP(w, r)
	if w.Code != http.StatusSeeOther || !store.ended[idle.ID] {
		t.Fatalf("signing out an idle session: %d, listed as ended %v; want 303 and listed", w.Code, store.ended[idle.ID])
	}
}
