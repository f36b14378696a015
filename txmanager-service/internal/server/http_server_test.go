package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// request is one HTTP request of a table.
type request struct {
	method, path, body string
	header             map[string]string
}

func (r request) send(h nethttp.Handler) *httptest.ResponseRecorder {
	method := r.method
	if method == "" {
		method = nethttp.MethodGet
	}
	req := httptest.NewRequest(method, "http://txm.test"+r.path, strings.NewReader(r.body))
	if r.body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range r.header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// reasonOf is the API reason of an error answer ("" for none).
func reasonOf(rec *httptest.ResponseRecorder) string {
	var body struct {
		Reason string `json:"reason"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	return body.Reason
}

func withKey(key string) map[string]string { return map[string]string{"X-API-Key": key} }

func createBody(signer string, requestID string) string {
	return fmt.Sprintf(`{"signer":%q,"requestId":%q,"to":%q,"gasLimit":21000}`, signer, requestID, signerA.Hex())
}

// The HTTP server answers every request as the API says: the API under its middleware
// (authentication, recovery, the retry hint as Retry-After), requests that are not in
// canonical form refused before routing, and the unauthenticated probes and document.
func TestHTTPServerAnswersAsTheAPISays(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	h := s.httpServer()
	// A read of this id panics below the transport: the caller gets 500, the server lives.
	poisoned := uuid.New()
	s.txs.panicOn = poisoned
	tests := []struct {
		name   string
		req    request
		status int
		reason string
		// header: a response header and its value; body: text the body must hold.
		header [2]string
		body   string
	}{
		{name: "a create answers 202 in JSON", req: request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "r1"), header: withKey(clientKey)},
			status: nethttp.StatusAccepted, header: [2]string{"Content-Type", "application/json"}, body: `"requestId":"r1"`},
		{name: "a replay answers 200", req: request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "r1"), header: withKey(clientKey)},
			status: nethttp.StatusOK, body: `"requestId":"r1"`},
		{name: "a read by request", req: request{path: "/api/v1/tx/by-request?signer=" + signerA.Hex() + "&requestId=r1", header: withKey(clientKey)},
			status: nethttp.StatusOK, body: `"requestId":"r1"`},
		{name: "no credentials", req: request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "r2")},
			status: nethttp.StatusUnauthorized, reason: "UNAUTHENTICATED"},
		{name: "an unknown key", req: request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "r2"), header: withKey("guess")},
			status: nethttp.StatusUnauthorized, reason: "UNAUTHENTICATED"},
		{name: "a compressed body is refused by its header", req: request{method: "POST", path: "/api/v1/tx", body: "\x1f\x8b\x08\x00",
			header: map[string]string{"X-API-Key": clientKey, "Content-Encoding": "gzip"}},
			status: nethttp.StatusUnsupportedMediaType, reason: "UNSUPPORTED_MEDIA_TYPE"},
		{name: "another node's signer: NOT_LEADER with Retry-After", req: request{method: "POST", path: "/api/v1/tx", body: createBody(signerLeased.Hex(), "r3"), header: withKey(clientKey)},
			status: nethttp.StatusConflict, reason: "NOT_LEADER", header: [2]string{"Retry-After", "2"}},
		{name: "a body over the limit", req: request{method: "POST", path: "/api/v1/tx", body: strings.Repeat(" ", 70<<10), header: withKey(clientKey)},
			status: nethttp.StatusBadRequest, reason: "REQUEST_TOO_LARGE"},
		{name: "a panic below the transport", req: request{path: "/api/v1/tx/" + poisoned.String(), header: withKey(clientKey)},
			status: nethttp.StatusInternalServerError, reason: "INTERNAL"},
		{name: "a doubled slash", req: request{path: "/api//v1/tx/x", header: withKey(clientKey)}, status: nethttp.StatusBadRequest, reason: "INVALID_ARGUMENT"},
		{name: "a dot segment", req: request{path: "/api/v1/tx/../admin/nodes", header: withKey(clientKey)}, status: nethttp.StatusBadRequest, reason: "INVALID_ARGUMENT"},
		{name: "an encoded slash", req: request{path: "/api/v1/tx/a%2Fb", header: withKey(clientKey)}, status: nethttp.StatusBadRequest, reason: "INVALID_ARGUMENT"},
		{name: "a query that cannot be parsed whole", req: request{path: "/api/v1/tx/completions?after=5;x", header: withKey(clientKey)},
			status: nethttp.StatusBadRequest, reason: "INVALID_ARGUMENT", body: "query"},
		{name: "no such endpoint", req: request{path: "/api/v2/tx"}, status: nethttp.StatusNotFound, reason: "NOT_FOUND"},
		{name: "a method the endpoint does not take", req: request{method: "DELETE", path: "/api/v1/tx"}, status: nethttp.StatusMethodNotAllowed, reason: "METHOD_NOT_ALLOWED"},
		{name: "the admin API refuses a client", req: request{path: "/api/v1/admin/signers", header: withKey(clientKey)}, status: nethttp.StatusForbidden, reason: "PERMISSION_DENIED"},
		{name: "the admin API serves an operator", req: request{path: "/api/v1/admin/signers", header: withKey(adminKey)}, status: nethttp.StatusOK, body: signerLeased.Hex()},
		{name: "the OpenAPI document", req: request{path: OpenAPIPath}, status: nethttp.StatusOK, header: [2]string{"Content-Type", "application/yaml"}, body: "openapi:"},
		{name: "the OpenAPI document's headers", req: request{method: "HEAD", path: OpenAPIPath}, status: nethttp.StatusOK, header: [2]string{"Content-Type", "application/yaml"}},
		{name: "the OpenAPI document is read-only", req: request{method: "POST", path: OpenAPIPath}, status: nethttp.StatusMethodNotAllowed, reason: "METHOD_NOT_ALLOWED"},
		{name: "liveness", req: request{path: "/healthz"}, status: nethttp.StatusOK, body: `"status":"ok"`},
		{name: "readiness", req: request{path: "/readyz"}, status: nethttp.StatusOK, body: `"database":"ok"`},
		{name: "metrics without metrics auth", req: request{path: "/metrics"}, status: nethttp.StatusOK, body: "tx_create_total"},
		{name: "no profiles unless enabled", req: request{path: "/debug/pprof/cmdline", header: withKey(adminKey)}, status: nethttp.StatusNotFound, reason: "NOT_FOUND"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.req.send(h)
			if rec.Code != tt.status || reasonOf(rec) != tt.reason {
				t.Fatalf("%s %s: %d %q, want %d %q; body %s", tt.req.method, tt.req.path, rec.Code, reasonOf(rec), tt.status, tt.reason, rec.Body)
			}
			if tt.header[0] != "" && !strings.HasPrefix(rec.Header().Get(tt.header[0]), tt.header[1]) {
				t.Errorf("%s: %q, want %q", tt.header[0], rec.Header().Get(tt.header[0]), tt.header[1])
			}
			if !strings.Contains(rec.Body.String(), tt.body) {
				t.Errorf("body %s lacks %q", rec.Body, tt.body)
			}
		})
	}
}

// A client that asks for protobuf gets it from Kratos' encoder; JSON clients get the
// hand-written encoder's bytes, and clients that ask for anything else JSON too: Kratos'
// XML and form codecs cannot encode every answer (an error's metadata, a batch's results).
func TestHTTPAnswersAreJSONUnlessProtobufIsAskedFor(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	h := s.httpServer()
	tests := []struct {
		name, accept, path, body string
		wantStatus               int
		wantInBody               string
	}{
		{"an error, XML asked for", "application/xml", "/api/v1/tx", `{"signer":"nope"}`, nethttp.StatusBadRequest, `"reason":"INVALID_ARGUMENT"`},
		{"a batch with a refusal, XML asked for", "application/xml", "/api/v1/tx:batch",
			fmt.Sprintf(`{"creates":[%s,{"signer":"bad"}]}`, createBody(signerA.Hex(), "xml-1")), nethttp.StatusOK, `"results"`},
		{"a batch, form asked for", "application/x-www-form-urlencoded", "/api/v1/tx:batch",
			fmt.Sprintf(`{"creates":[%s]}`, createBody(signerA.Hex(), "form-1")), nethttp.StatusOK, `"results"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			header := withKey(clientKey)
			header["Accept"] = tt.accept
			rec := request{method: "POST", path: tt.path, body: tt.body, header: header}.send(h)
			if rec.Code != tt.wantStatus || rec.Header().Get("Content-Type") != "application/json" || !strings.Contains(rec.Body.String(), tt.wantInBody) {
				t.Fatalf("%d %s %s, want %d JSON with %s", rec.Code, rec.Header().Get("Content-Type"), rec.Body, tt.wantStatus, tt.wantInBody)
			}
		})
	}
}

// A client that asks for protobuf gets it; JSON clients get the hand-written encoder's bytes.
func TestHTTPResponsesFollowTheAcceptHeader(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	h := s.httpServer()
	created := request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "codec"), header: withKey(clientKey)}.send(h)
	if created.Code != nethttp.StatusAccepted {
		t.Fatalf("create: %d %s", created.Code, created.Body)
	}
	var tx struct {
		Tx struct {
			TxID string `json:"txId"`
		} `json:"tx"`
	}
	if err := json.Unmarshal(created.Body.Bytes(), &tx); err != nil || tx.Tx.TxID == "" {
		t.Fatalf("create answer %s: %v", created.Body, err)
	}
	tests := []struct {
		accept      string
		contentType string
		decode      func(body []byte) (string, error)
	}{
		{"", "application/json", jsonTxID},
		{"*/*", "application/json", jsonTxID},
		{"application/json; charset=utf-8", "application/json", jsonTxID},
		{"application/proto", "application/proto", func(body []byte) (string, error) {
			var got v1.Tx
			err := proto.Unmarshal(body, &got)
			return got.GetTxId(), err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.accept, func(t *testing.T) {
			header := withKey(clientKey)
			if tt.accept != "" {
				header["Accept"] = tt.accept
			}
			rec := request{path: "/api/v1/tx/" + tx.Tx.TxID, header: header}.send(h)
			if rec.Code != nethttp.StatusOK || !strings.HasPrefix(rec.Header().Get("Content-Type"), tt.contentType) {
				t.Fatalf("%d %s, want 200 %s", rec.Code, rec.Header().Get("Content-Type"), tt.contentType)
			}
			if id, err := tt.decode(rec.Body.Bytes()); err != nil || id != tx.Tx.TxID {
				t.Fatalf("decoded tx id %q (%v), want %s", id, err, tx.Tx.TxID)
			}
		})
	}
}

func jsonTxID(body []byte) (string, error) {
	var tx struct {
		TxID string `json:"txId"`
	}
	err := json.Unmarshal(body, &tx)
	return tx.TxID, err
}

// With observability.metricsAuth, /metrics and the profiles need a credential granted
// metrics (or admin); a scraper may send its key as a bearer token.
func TestMetricsAndProfilesNeedTheMetricsGrant(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) { c.Observability.MetricsAuth, c.Observability.Pprof = true, true }})
	h := s.httpServer()
	tests := []struct {
		name   string
		req    request
		status int
		reason string
	}{
		{"no credentials", request{path: "/metrics"}, nethttp.StatusUnauthorized, "UNAUTHENTICATED"},
		{"a client's key", request{path: "/metrics", header: withKey(clientKey)}, nethttp.StatusForbidden, "PERMISSION_DENIED"},
		{"a wrong bearer token", request{path: "/metrics", header: map[string]string{"Authorization": "Bearer guess"}}, nethttp.StatusUnauthorized, "UNAUTHENTICATED"},
		{"the scraper's key", request{path: "/metrics", header: withKey(metricsKey)}, nethttp.StatusOK, ""},
		{"the scraper's key as a bearer token", request{path: "/metrics", header: map[string]string{"Authorization": "Bearer " + metricsKey}}, nethttp.StatusOK, ""},
		{"an operator's key", request{path: "/metrics", header: withKey(adminKey)}, nethttp.StatusOK, ""},
		{"profiles without credentials", request{path: "/debug/pprof/cmdline"}, nethttp.StatusUnauthorized, "UNAUTHENTICATED"},
		{"a profile by name for an operator", request{path: "/debug/pprof/goroutine?debug=1", header: withKey(adminKey)}, nethttp.StatusOK, ""},
		{"the profiles' index for an operator", request{path: "/debug/pprof/", header: withKey(adminKey)}, nethttp.StatusOK, ""},
		{"one profile for the scraper", request{path: "/debug/pprof/cmdline", header: withKey(metricsKey)}, nethttp.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := tt.req.send(h)
			if rec.Code != tt.status || reasonOf(rec) != tt.reason {
				t.Fatalf("%d %q, want %d %q; body %.200s", rec.Code, reasonOf(rec), tt.status, tt.reason, rec.Body)
			}
		})
	}
}

// A credential past its rate is refused with 429 and the time after which one more
// request passes; another credential's bucket is its own, and the refusals are counted.
func TestRateLimitPerCredential(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
		c.Server.RateLimit = conf.RateLimit{Enabled: true, RequestsPerSecond: 0.5, Burst: 2}
	}})
	h := s.httpServer()
	read := func(key string) request {
		return request{path: "/api/v1/tx/by-request?signer=" + signerA.Hex() + "&requestId=none", header: withKey(key)}
	}
	tests := []struct {
		name   string
		req    request
		status int
		retry  string
	}{
		{"first of the burst", read(clientKey), nethttp.StatusNotFound, ""},
		{"second of the burst", read(clientKey), nethttp.StatusNotFound, ""},
		{"past the burst", read(clientKey), nethttp.StatusTooManyRequests, "2"},
		// Only a verified peer's forwarded request passes uncounted; a header is no proof.
		{"claiming to be forwarded over HTTP", request{path: read(clientKey).path, header: map[string]string{"X-API-Key": clientKey, controllers.HopsHeader: "1"}},
			nethttp.StatusTooManyRequests, "2"},
		{"another credential", read(adminKey), nethttp.StatusNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := tt.req.send(h)
			if rec.Code != tt.status || rec.Header().Get("Retry-After") != tt.retry {
				t.Fatalf("%d Retry-After %q, want %d %q (%s)", rec.Code, rec.Header().Get("Retry-After"), tt.status, tt.retry, rec.Body)
			}
		})
	}
	metrics := request{path: "/metrics"}.send(h)
	if !strings.Contains(metrics.Body.String(), "rate_limited_total 2") {
		t.Errorf("/metrics does not count the refusal:\n%s", grepLines(metrics.Body.String(), "rate_limited"))
	}
}

func grepLines(text, word string) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if strings.Contains(line, word) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// A client that sends its body a byte at a time does not hold its connection past the
// headers' time and the request's own: the body is read before authentication, and its
// reading ignores the handler's timeout.
func TestATrickledBodyDoesNotHoldItsConnection(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
		c.Server.HTTP.Timeout = conf.Duration(300 * time.Millisecond)
		c.Server.HTTP.ReadHeaderTimeout = conf.Duration(300 * time.Millisecond)
	}})
	srv := s.httpServer()
	go func() { _ = srv.Start(context.Background()) }()
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	conn, err := net.Dial("tcp", s.listeners.HTTP.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "POST /api/v1/tx HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"); err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := conn.Read(buf); err != nil {
				closed <- time.Since(start)
				return
			}
		}
	}()
	for {
		select {
		case after := <-closed:
			t.Logf("the server closed the connection after %v", after)
			return
		case <-time.After(200 * time.Millisecond):
			if time.Since(start) > 5*time.Second {
				t.Fatal("a body trickled for 5 s still holds its connection (bound: 0.6 s)")
			}
			_, _ = conn.Write([]byte(" "))
		}
	}
}

// A panic while one create of a batch is served (on a goroutine of its own, out of the
// server's recovery) is answered INTERNAL for that create alone; the others are answered
// and the process lives.
func TestAPanicInOneCreateOfABatchIsThatCreatesAlone(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	h := s.httpServer()
	s.txs.panicOnRequest = "poison"
	body := fmt.Sprintf(`{"creates":[%s,%s]}`, createBody(signerA.Hex(), "poison"), createBody(signerA.Hex(), "fine"))
	rec := request{method: "POST", path: "/api/v1/tx:batch", body: body, header: withKey(clientKey)}.send(h)
	if rec.Code != nethttp.StatusOK {
		t.Fatalf("the batch: %d %s, want 200", rec.Code, rec.Body)
	}
	var answer struct {
		Results []struct {
			Error *struct {
				Reason string `json:"reason"`
			} `json:"error"`
		} `json:"results"`
		Created, Refused int
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); err != nil || len(answer.Results) != 2 {
		t.Fatalf("the batch's answer %s: %v", rec.Body, err)
	}
	if e := answer.Results[0].Error; e == nil || e.Reason != "INTERNAL" {
		t.Fatalf("the poisoned create: %s, want INTERNAL", rec.Body)
	}
	if answer.Results[1].Error != nil || answer.Created != 1 || answer.Refused != 1 {
		t.Fatalf("the batch's answer %s: want the other create made", rec.Body)
	}
}

// A create refused for its signer's spelling (a miscased checksum) names no key: a valid
// create of the batch with the same signer and requestId is made, not refused as its repeat.
func TestABatchsRefusedCreateIsNotRepeatedByAValidOne(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	h := s.httpServer()
	miscased := strings.Replace(signerChecksummed.Hex(), "6E0F", "6e0F", 1)
	body := fmt.Sprintf(`{"creates":[%s,%s]}`, createBody(miscased, "pay-1"), createBody(strings.ToLower(signerChecksummed.Hex()), "pay-1"))
	rec := request{method: "POST", path: "/api/v1/tx:batch", body: body, header: withKey(adminKey)}.send(h) // granted every signer
	var answer struct {
		Results []struct {
			Error *struct {
				Reason   string            `json:"reason"`
				Metadata map[string]string `json:"metadata"`
			} `json:"error"`
		} `json:"results"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &answer); rec.Code != nethttp.StatusOK || err != nil || len(answer.Results) != 2 {
		t.Fatalf("the batch: %d %s (%v)", rec.Code, rec.Body, err)
	}
	if e := answer.Results[0].Error; e == nil || e.Reason != "INVALID_ARGUMENT" || !strings.Contains(fmt.Sprint(e.Metadata), "signer") {
		t.Fatalf("the miscased signer's create: %s, want refused on signer", rec.Body)
	}
	if answer.Results[1].Error != nil {
		t.Fatalf("the valid create: %s, want made", rec.Body)
	}
}

// Without authentication the service answers only requests addressed to a loopback name: a
// web page can point a name it controls at 127.0.0.1 (DNS rebinding), and the browser then
// sends that name as the Host. With authentication the Host is not looked at.
func TestWithoutAuthenticationOnlyLoopbackHostsAreServed(t *testing.T) {
	t.Parallel()
	open := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) { c.Auth = conf.Auth{} }}).httpServer()
	authed := newStack(t, stackOptions{}).httpServer()
	tests := []struct {
		name   string
		h      nethttp.Handler
		host   string
		status int
		reason string
	}{
		{"auth off, 127.0.0.1", open, "127.0.0.1:8080", nethttp.StatusOK, ""},
		{"auth off, localhost", open, "localhost:8080", nethttp.StatusOK, ""},
		{"auth off, [::1]", open, "[::1]:8080", nethttp.StatusOK, ""},
		{"auth off, a .localhost name", open, "txm.localhost", nethttp.StatusOK, ""},
		{"auth off, another name", open, "rebound.example.com:8080", nethttp.StatusForbidden, "PERMISSION_DENIED"},
		{"auth off, another address", open, "10.0.0.5", nethttp.StatusForbidden, "PERMISSION_DENIED"},
		{"auth on, another name", authed, "txm.example.com", nethttp.StatusOK, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest(nethttp.MethodGet, "http://"+tt.host+"/healthz", nil)
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, req)
			if rec.Code != tt.status || reasonOf(rec) != tt.reason {
				t.Fatalf("%d %q, want %d %q; body %.200s", rec.Code, reasonOf(rec), tt.status, tt.reason, rec.Body)
			}
		})
	}
}
