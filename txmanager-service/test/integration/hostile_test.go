package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// The reasons a refused hostile request may carry: it is malformed, too big, not JSON, uses
// a method the endpoint does not take, names a key the service does not hold, or names
// nothing that exists.
var hostileReasons = map[string]bool{"INVALID_ARGUMENT": true, "REQUEST_TOO_LARGE": true, "UNSUPPORTED_MEDIA_TYPE": true,
	"METHOD_NOT_ALLOWED": true, "UNKNOWN_SIGNER": true, "NOT_FOUND": true}

// hostileRequest is one request as an attacker would send it: any method, raw path, raw
// body bytes and content type.
type hostileRequest struct {
	method      string
	path        string // escaped, sent as is
	body        []byte
	contentType string // "" means application/json
	// streamed, when positive, replaces body with that many bytes of one endless JSON
	// string, generated while sending so that the client holds none of it; chunked hides
	// its length (no Content-Length), so only the server's reading limit stops it.
	streamed int64
	chunked  bool
}

// send writes the request on a connection of its own and reads the answer while the body
// is still being written: a server that refuses a large body early answers and closes,
// and the answer, not the client's broken pipe, is what is judged. Redirects are not
// followed.
func (h hostileRequest) send(baseURL string) (apiResponse, error) {
	var body io.Reader
	if h.body != nil {
		body = bytes.NewReader(h.body)
	}
	if h.streamed > 0 {
		body = io.MultiReader(strings.NewReader(streamedPrefix), &filler{left: h.streamed})
	}
	req, err := http.NewRequest(h.method, baseURL+h.path, body)
	if err != nil {
		return apiResponse{}, err
	}
	switch {
	case h.streamed > 0 && h.chunked:
		req.ContentLength = -1 // unknown: written chunked
	case h.streamed > 0:
		req.ContentLength = int64(len(streamedPrefix)) + h.streamed
	}
	contentType := h.contentType
	if contentType == "" {
		contentType = "application/json"
	}
	req.Header.Set("Content-Type", contentType)
	req.Close = true

	conn, err := net.DialTimeout("tcp", req.URL.Host, 10*time.Second)
	if err != nil {
		return apiResponse{}, err
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(time.Minute)); err != nil {
		return apiResponse{}, err
	}
	written := make(chan error, 1)
	go func() { written <- req.Write(conn) }()
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		conn.Close()
		return apiResponse{}, fmt.Errorf("no answer (writing: %v): %w", <-written, err) //nolint:errorlint // the write error may be nil; only the read error is the cause
	}
	defer resp.Body.Close()
	out := readResponse(resp)
	if location := resp.Header.Get("Location"); location != "" {
		out.raw += " (Location: " + location + ")"
	}
	return out, nil
}

// streamedPrefix opens the JSON string a streamed body never closes.
const streamedPrefix = `{"data":"0x`

// filler yields left bytes of 'a' without allocating them.
type filler struct{ left int64 }

var fillerBlock = []byte(strings.Repeat("a", 32<<10))

func (f *filler) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n := 0
	for n < len(p) {
		n += copy(p[n:], fillerBlock)
	}
	f.left -= int64(n)
	return n, nil
}

// checkRefusedCleanly is what every hostile request must get: a 4xx (never a 5xx, never a
// success) with a JSON body naming a known reason and a message. mayServe admits a 2xx for
// the few rows where serving the request is also a correct answer.
func checkRefusedCleanly(a apiResponse, wantReason string, mayServe bool) error {
	msg, _ := a.body["message"].(string)
	switch {
	case mayServe && a.status >= 200 && a.status <= 299 && a.body != nil:
		return nil
	case a.status < 400 || a.status > 499:
		want := "4xx"
		if mayServe {
			want = "2xx or 4xx"
		}
		return fmt.Errorf("status %d, want %s: %.300s", a.status, want, a.raw)
	case !hostileReasons[a.reason()]:
		return fmt.Errorf("status %d with reason %q, want one of the hostile reasons: %.300s", a.status, a.reason(), a.raw)
	case wantReason != "" && a.reason() != wantReason:
		return fmt.Errorf("status %d reason %s, want %s: %.300s", a.status, a.reason(), wantReason, a.raw)
	case msg == "":
		return fmt.Errorf("status %d reason %s without a message: %.300s", a.status, a.reason(), a.raw)
	}
	return nil
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// Bad input of every kind an attacker might try is refused with a 4xx and a stable reason,
// leaves the service healthy, consumes no nonce, and is never buffered without bound.
//
// Not parallel: the heap bound is measured in this process, where the service runs, and
// other tests' services would be counted with it.
func TestHostileInputsAreRefusedCleanly(t *testing.T) {
	s := startService(t, serviceOptions{})
	signer, to := devAddress(t, 8), devAddress(t, 9)
	if a := s.create(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000}); a.status != http.StatusAccepted {
		t.Fatalf("baseline create: %d %s", a.status, a.raw)
	}
	// A second signer's transaction that is never mined (its fee cap of 1 wei is below any
	// base fee), for the admin rows: only a broadcast, unmined transaction can be resolved.
	other := devAddress(t, 7)
	unmined := s.create(t, map[string]any{"signer": other, "to": to, "value": "1", "gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1"})
	unminedID, _ := unmined.tx()["txId"].(string)
	if unmined.status != http.StatusAccepted || unminedID == "" {
		t.Fatalf("create of the unmined transaction: %d %s", unmined.status, unmined.raw)
	}
	waitFor(t, 30*time.Second, "the unmined transaction to be broadcast", func() bool {
		return s.do(t, http.MethodGet, "/api/v1/tx/"+unminedID, nil).body["state"] == "TRACKING"
	})
	cursorBefore := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer)
	rowsBefore := s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1", signer)

	// createBody is a valid create for signer with field set to the raw JSON value, or with
	// field added when it is not one of the base fields; field "" leaves the base as is.
	createBody := func(field, raw string) []byte {
		members := [][2]string{{"signer", jsonString(signer)}, {"to", jsonString(to)}, {"value", `"1"`}, {"gasLimit", "21000"}}
		found := field == ""
		for i := range members {
			if members[i][0] == field {
				members[i][1], found = raw, true
			}
		}
		if !found {
			members = append(members, [2]string{field, raw})
		}
		parts := make([]string, len(members))
		for i, m := range members {
			parts[i] = jsonString(m[0]) + ":" + m[1]
		}
		return []byte("{" + strings.Join(parts, ",") + "}")
	}
	valid := string(createBody("", ""))
	post := func(body []byte) hostileRequest {
		return hostileRequest{method: http.MethodPost, path: "/api/v1/tx", body: body}
	}
	get := func(path string) hostileRequest { return hostileRequest{method: http.MethodGet, path: path} }

	type row struct {
		name string
		req  hostileRequest
		want string // the exact reason when it is certain; "" accepts any hostile reason
	}
	var rows []row
	sqlStrings := []string{"'; DROP TABLE managed_tx; --", `" OR 1=1 --`}
	for _, field := range []string{"signer", "requestId", "to", "value", "data", "maxFeePerGas", "maxPriorityFeePerGas"} {
		for i, sql := range sqlStrings {
			rows = append(rows, row{fmt.Sprintf("sql %d in %s", i+1, field), post(createBody(field, jsonString(sql))), "INVALID_ARGUMENT"})
		}
	}
	homoglyph := strings.Replace(signer, "a", "\u0430", 1) // Cyrillic a
	if homoglyph == signer {
		homoglyph = strings.Replace(signer, "0", "\uff10", 1) // fullwidth zero
	}
	rows = append(rows,
		// Huge and malformed numbers.
		row{"value of 10000 digits", post(createBody("value", jsonString(strings.Repeat("9", 10_000)))), "INVALID_ARGUMENT"},
		row{"value as a 10000-digit JSON number", post(createBody("value", strings.Repeat("9", 10_000))), "INVALID_ARGUMENT"},
		row{"gasLimit 1e30", post(createBody("gasLimit", "1e30")), "INVALID_ARGUMENT"},
		row{"gasLimit 10^30 in digits", post(createBody("gasLimit", "1"+strings.Repeat("0", 30))), "INVALID_ARGUMENT"},
		row{"gasLimit 2^64 as a string", post(createBody("gasLimit", `"18446744073709551616"`)), "INVALID_ARGUMENT"},
		row{"negative gasLimit", post(createBody("gasLimit", "-21000")), "INVALID_ARGUMENT"},
		row{"fractional gasLimit", post(createBody("gasLimit", "21000.5")), "INVALID_ARGUMENT"},
		row{"maxFeePerGas above 2^256", post(createBody("maxFeePerGas", jsonString("0x1"+strings.Repeat("0", 64)))), "INVALID_ARGUMENT"},
		// Unicode.
		row{"RTL override in requestId", post(createBody("requestId", jsonString("invoice-\u202e24"))), "INVALID_ARGUMENT"},
		row{"emoji in requestId", post(createBody("requestId", jsonString("pay-🙂"))), "INVALID_ARGUMENT"},
		row{"emoji in to", post(createBody("to", jsonString("🙂"+to[2:]))), "INVALID_ARGUMENT"},
		row{"escaped NUL in requestId", post(createBody("requestId", `"a\u0000b"`)), "INVALID_ARGUMENT"},
		row{"escaped NUL in signer", post(createBody("signer", jsonString(signer[:41]+"\x00"))), "INVALID_ARGUMENT"},
		row{"raw NUL byte in a string", post(createBody("requestId", "\"a\x00b\"")), "INVALID_ARGUMENT"},
		row{"invalid UTF-8 in signer", post(createBody("signer", "\"\xff\xfe"+signer[2:]+"\"")), "INVALID_ARGUMENT"},
		row{"invalid UTF-8 in requestId", post(createBody("requestId", "\"id-\xc3\x28\"")), "INVALID_ARGUMENT"},
		row{"lone surrogate escape in requestId", post(createBody("requestId", `"\ud800"`)), "INVALID_ARGUMENT"},
		row{"homoglyph hex digit in signer", post(createBody("signer", jsonString(homoglyph))), "INVALID_ARGUMENT"},
		row{"homoglyph x in to", post(createBody("to", jsonString("0\u0445"+to[2:]))), "INVALID_ARGUMENT"},
		// Wrong types.
		row{"signer as number", post(createBody("signer", "123")), "INVALID_ARGUMENT"},
		row{"signer as array", post(createBody("signer", "["+jsonString(signer)+"]")), "INVALID_ARGUMENT"},
		row{"signer as object", post(createBody("signer", `{"address":`+jsonString(signer)+`}`)), "INVALID_ARGUMENT"},
		row{"signer as null", post(createBody("signer", "null")), "INVALID_ARGUMENT"},
		row{"value as bool", post(createBody("value", "true")), "INVALID_ARGUMENT"},
		row{"gasLimit as object", post(createBody("gasLimit", `{"$gt":0}`)), "INVALID_ARGUMENT"},
		// Structure.
		row{"duplicate signer", post([]byte(`{"signer":` + jsonString(signer) + `,` + valid[1:])), "INVALID_ARGUMENT"},
		row{"duplicate gasLimit", post(createBody("to", jsonString(to)+`,"gasLimit":30000`)), "INVALID_ARGUMENT"},
		row{"requestId and request_id", post(createBody("requestId", `"a","request_id":"b"`)), "INVALID_ARGUMENT"},
		row{"unknown field", post(createBody("isAdmin", "true")), "INVALID_ARGUMENT"},
		row{"100k nested arrays", post([]byte(strings.Repeat("[", 100_000))), "INVALID_ARGUMENT"},
		row{"100k nested arrays in signer", post(createBody("signer", strings.Repeat("[", 100_000))), "INVALID_ARGUMENT"},
		row{"100k nested objects in an unknown field", post(createBody("x", strings.Repeat(`{"a":`, 100_000))), "INVALID_ARGUMENT"},
		row{"10 MiB body with its length", hostileRequest{method: http.MethodPost, path: "/api/v1/tx", streamed: 10 << 20}, "REQUEST_TOO_LARGE"},
		row{"10 MiB body chunked", hostileRequest{method: http.MethodPost, path: "/api/v1/tx", streamed: 10 << 20, chunked: true}, "REQUEST_TOO_LARGE"},
		row{"text/plain body", hostileRequest{method: http.MethodPost, path: "/api/v1/tx", contentType: "text/plain",
			body: []byte("signer=" + signer + "&to=" + to + "&value=1")}, "UNSUPPORTED_MEDIA_TYPE"},
		// A browser sends text/plain cross-origin without a CORS preflight, so any web page
		// could create transactions on a loopback, unauthenticated service if a JSON API
		// took it. The other signer's, so that a create here is not counted as a hostile
		// request consuming the first signer's nonces.
		row{"valid create as text/plain", hostileRequest{method: http.MethodPost, path: "/api/v1/tx", contentType: "text/plain",
			body: []byte(strings.Replace(valid, jsonString(signer), jsonString(other), 1))}, ""},
		row{"form-encoded body", hostileRequest{method: http.MethodPost, path: "/api/v1/tx", contentType: "application/x-www-form-urlencoded",
			body: []byte(url.Values{"signer": {signer}, "to": {to}, "value": {"1"}, "gasLimit": {"21000"}}.Encode())}, "UNSUPPORTED_MEDIA_TYPE"},
		row{"DELETE on the create endpoint", hostileRequest{method: http.MethodDelete, path: "/api/v1/tx"}, "METHOD_NOT_ALLOWED"},
		row{"PUT on a transaction", hostileRequest{method: http.MethodPut, path: "/api/v1/tx/" + unminedID, body: []byte(`{}`)}, "METHOD_NOT_ALLOWED"},
		row{"empty object", post([]byte(`{}`)), "INVALID_ARGUMENT"},
		row{"empty body", post([]byte{}), "INVALID_ARGUMENT"},
		row{"JSON null", post([]byte(`null`)), "INVALID_ARGUMENT"},
		row{"trailing garbage", post([]byte(valid + ` garbage`)), "INVALID_ARGUMENT"},
		row{"two objects", post([]byte(valid + valid)), "INVALID_ARGUMENT"},
		row{"array at the top level", post([]byte("[" + valid + "]")), "INVALID_ARGUMENT"},
		row{"10 KiB requestId", post(createBody("requestId", jsonString(strings.Repeat("r", 10<<10)))), "INVALID_ARGUMENT"},
		row{"unknown signer", post(createBody("signer", jsonString("0x000000000000000000000000000000000000dEaD"))), "UNKNOWN_SIGNER"},
		// Paths.
		row{"path traversal in tx id", get("/api/v1/tx/..%2F..%2Fetc"), ""},
		row{"path traversal to /etc/passwd", get("/api/v1/tx/..%2F..%2F..%2F..%2Fetc%2Fpasswd"), ""},
		row{"sql in tx id", get("/api/v1/tx/" + url.PathEscape("'; DROP TABLE managed_tx; --")), "INVALID_ARGUMENT"},
		row{"sql in a 36-character tx id", get("/api/v1/tx/" + url.PathEscape("'; DROP TABLE managed_tx; --12345678")), "INVALID_ARGUMENT"},
		row{"NUL in tx id", get("/api/v1/tx/%00"), "INVALID_ARGUMENT"},
		row{"path traversal in admin resolve", hostileRequest{method: http.MethodPost, path: "/api/v1/admin/tx/..%2F..%2Fetc/resolve", body: []byte(`{"action":"CANCEL"}`)}, ""},
		// Query strings.
		// Spaces make these impossible request ids (visible ASCII only): refused, not looked up.
		row{"by-request with sql in requestId", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=" + url.QueryEscape("'; DROP TABLE managed_tx; --")), "INVALID_ARGUMENT"},
		row{"by-request with sql 2 in requestId", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=" + url.QueryEscape(`" OR 1=1 --`)), "INVALID_ARGUMENT"},
		row{"by-request with sql, no spaces", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=" + url.QueryEscape("';DROP/**/TABLE/**/managed_tx;--")), "NOT_FOUND"},
		row{"by-request with sql in signer", get("/api/v1/tx/by-request?signer=" + url.QueryEscape("' OR 1=1 --") + "&requestId=x"), "INVALID_ARGUMENT"},
		row{"by-request with NUL in requestId", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=a%00b"), ""},
		row{"by-request with invalid UTF-8 in requestId", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=%FF%FE"), ""},
		row{"by-request with a 10 KiB requestId", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=" + strings.Repeat("r", 10<<10)), ""},
		row{"by-request without requestId", get("/api/v1/tx/by-request?signer=" + signer), "INVALID_ARGUMENT"},
		row{"completions after=-1", get("/api/v1/tx/completions?after=-1"), "INVALID_ARGUMENT"},
		row{"completions after=huge", get("/api/v1/tx/completions?after=" + strings.Repeat("9", 30) + "-1"), "INVALID_ARGUMENT"},
		row{"completions after=very long", get("/api/v1/tx/completions?after=" + strings.Repeat("9", 10<<10)), "INVALID_ARGUMENT"},
		row{"completions after=sql", get("/api/v1/tx/completions?after=" + url.QueryEscape("1-1; DROP TABLE managed_tx")), "INVALID_ARGUMENT"},
		row{"completions limit=-5", get("/api/v1/tx/completions?limit=-5"), "INVALID_ARGUMENT"},
		// Go's parser drops a pair holding a raw ";" and keeps the rest: the cursor would
		// vanish and the reader restart from the beginning.
		row{"completions cursor with a raw semicolon", get("/api/v1/tx/completions?after=5;x"), "INVALID_ARGUMENT"},
		row{"by-request with a bad escape", get("/api/v1/tx/by-request?signer=" + signer + "&requestId=a%zz"), "INVALID_ARGUMENT"},
		row{"readiness with a raw semicolon", get("/readyz?x=1;y"), "INVALID_ARGUMENT"},
		row{"completions wait negative", get("/api/v1/tx/completions?wait=-1s"), "INVALID_ARGUMENT"},
		row{"completions wait garbage", get("/api/v1/tx/completions?wait=soon"), "INVALID_ARGUMENT"},
		row{"completions limit=abc", get("/api/v1/tx/completions?limit=abc"), "INVALID_ARGUMENT"},
		row{"completions limit=2^32", get("/api/v1/tx/completions?limit=4294967296"), "INVALID_ARGUMENT"},
		row{"admin signer status with sql", get("/api/v1/admin/signers/" + url.PathEscape("' OR 1=1 --")), "INVALID_ARGUMENT"},
		row{"admin stuck with sql in signer", get("/api/v1/admin/stuck?signer=" + url.QueryEscape("'; DROP TABLE managed_tx; --")), "INVALID_ARGUMENT"},
		row{"admin stuck limit=-5", get("/api/v1/admin/stuck?limit=-5"), "INVALID_ARGUMENT"},
		row{"admin resolve with an unknown action", hostileRequest{method: http.MethodPost, path: "/api/v1/admin/tx/" + unminedID + "/resolve",
			body: []byte(`{"action":"'; DROP TABLE managed_tx; --"}`)}, "INVALID_ARGUMENT"},
	)
	// Hostile, but serving them is also a correct answer; a 5xx never is.
	servable := []row{
		// 0 is proto3's unset value (gRPC cannot tell it from absent): the default page.
		{"completions limit=0", get("/api/v1/tx/completions?limit=0"), ""},
		{"admin stuck limit=0", get("/api/v1/admin/stuck?limit=0"), ""},
		// A NOOP resolution may be carried out with the reason cleaned, or refused.
		{"admin resolve with NUL in reason", hostileRequest{method: http.MethodPost, path: "/api/v1/admin/tx/" + unminedID + "/resolve",
			body: []byte(`{"action":"NOOP","reason":"a\u0000b"}`)}, ""},
		// The service keeps 500 bytes of a reason: 499 + a 2-byte rune must not be cut in two.
		{"admin resolve with a reason cut inside a rune", hostileRequest{method: http.MethodPost, path: "/api/v1/admin/tx/" + unminedID + "/resolve",
			body: []byte(`{"action":"NOOP","reason":"` + strings.Repeat("a", 499) + `é"}`)}, ""},
	}

	run := func(rows []row, mayServe bool) {
		for _, tc := range rows {
			t.Run(tc.name, func(t *testing.T) {
				a, err := tc.req.send(s.httpURL)
				if err != nil {
					t.Fatalf("%s %.200s: %v", tc.req.method, tc.req.path, err)
				}
				if err := checkRefusedCleanly(a, tc.want, mayServe); err != nil {
					t.Errorf("%s %.200s: %v", tc.req.method, tc.req.path, err)
				}
			})
		}
	}
	run(rows, false)
	run(servable, true)

	// 200 hostile requests at once, most of them 10 MiB bodies: what the service holds in
	// memory must stay bounded by its body limit, not grow with what clients send.
	heapGrowth := concurrentHostileHeapGrowth(t, s.httpURL, 200, []hostileRequest{
		{method: http.MethodPost, path: "/api/v1/tx", streamed: 10 << 20},
		{method: http.MethodPost, path: "/api/v1/tx", streamed: 10 << 20, chunked: true},
		post([]byte(strings.Repeat("[", 100_000))),
		post(createBody("requestId", jsonString("'; DROP TABLE managed_tx; --"))),
	})
	t.Logf("heap grew by at most %d MiB during 200 concurrent hostile requests", heapGrowth>>20)
	if heapGrowth > 200<<20 {
		t.Errorf("heap grew by %d MiB during 200 concurrent hostile requests, want < 200 MiB", heapGrowth>>20)
	}

	// Still healthy, nothing consumed, and a normal create still works.
	if a := s.do(t, http.MethodGet, "/healthz", nil); a.status != http.StatusOK {
		t.Fatalf("/healthz after hostile input: %d %s", a.status, a.raw)
	}
	if after := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); after != cursorBefore {
		t.Errorf("cursor moved from %d to %d on hostile input", cursorBefore, after)
	}
	if after := s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1", signer); after != rowsBefore {
		t.Errorf("managed_tx grew from %d to %d on hostile input", rowsBefore, after)
	}
	a := s.create(t, map[string]any{"signer": signer, "to": to, "value": "2", "gasLimit": 21000, "requestId": "after-hostile"})
	if a.status != http.StatusAccepted {
		t.Fatalf("create after hostile input: %d %s", a.status, a.raw)
	}
	if nonce := a.tx()["nonce"]; nonce != fmt.Sprint(cursorBefore) {
		t.Errorf("create after hostile input got nonce %v, want %d (the next unused one)", nonce, cursorBefore)
	}
}

// concurrentHostileHeapGrowth sends n requests (cycling through kinds) at once, checks that
// each is refused cleanly, and returns the largest growth of this process's live heap seen
// meanwhile.
func concurrentHostileHeapGrowth(t *testing.T, baseURL string, n int, kinds []hostileRequest) uint64 {
	t.Helper()

	var stats runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&stats)
	baseline := stats.HeapAlloc
	peak := baseline // written by the sampler only; read once it has stopped
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		ticker := time.NewTicker(10 * time.Millisecond)
		defer ticker.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapAlloc)
			select {
			case <-stop:
				return
			case <-ticker.C:
			}
		}
	}()

	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			req := kinds[i%len(kinds)]
			a, err := req.send(baseURL)
			if err == nil {
				err = checkRefusedCleanly(a, "", false)
			}
			if err != nil {
				errs[i] = fmt.Errorf("request %d (%s %s, %d streamed bytes, chunked %t): %w", i, req.method, req.path, req.streamed, req.chunked, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(stop)
	<-sampled
	failed := 0
	for _, err := range errs {
		if err != nil {
			if failed < 10 {
				t.Error(err)
			}
			failed++
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d concurrent hostile requests were not refused cleanly", failed, n)
	}
	return peak - baseline
}
