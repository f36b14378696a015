package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// chromiumPath is the browser the console's tests drive: $CHROMIUM, or Debian's chromium
// (make test installs it, as it installs PostgreSQL).
func chromiumPath(t testing.TB) string {
	t.Helper()
	for _, candidate := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if candidate == "" {
			continue
		}
		if path, err := exec.LookPath(candidate); err == nil {
			return path
		}
	}
	t.Fatal("no chromium for the console's browser tests: run `make test` (it installs Debian's chromium), or apt-get install chromium, or set CHROMIUM to a Chrome binary")
	return ""
}

// browser is one headless chromium with its own cookies (one signed-in operator).
type browser struct {
	ctx  context.Context
	base string
}

func newBrowser(t *testing.T, base string) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chromiumPath(t)), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("user-data-dir", t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser on ctx itself: started under a bounded child it
	// would end with that child.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1280, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	b := &browser{ctx: ctx, base: base}
	return b
}

// do runs actions with a bound, failing the test with what was being done.
func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}

// run runs one action that answers a value.
func run[T any](t *testing.T, b *browser, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatalf("browser: %v", err)
	}
	return v
}

func (b *browser) open(t *testing.T, path string) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		err := chromedp.Do(ctx, chromedp.Navigate(b.base+path), chromedp.WaitReady(chromedp.CSS("body")))
		cancel()
		// A page's live script reloads it when its transaction becomes final, which can
		// abort a navigation away from it that starts at that moment.
		if err == nil || try == 3 || !strings.Contains(err.Error(), "ERR_ABORTED") {
			if err != nil {
				t.Fatalf("browser: open %s: %v", path, err)
			}
			return
		}
	}
}

// text is the visible text of the first element matching selector.
func (b *browser) text(t *testing.T, selector string) string {
	t.Helper()
	return run(t, b, chromedp.Text(chromedp.CSS(selector)))
}

// eval evaluates a JavaScript expression on the page.
func eval[T any](t *testing.T, b *browser, expression string) T {
	t.Helper()
	return run(t, b, chromedp.Evaluate[T](expression))
}

func (b *browser) count(t *testing.T, selector string) int {
	t.Helper()
	return eval[int](t, b, fmt.Sprintf("document.querySelectorAll(%q).length", selector))
}

// signIn signs in through the form with a credential.
func (b *browser) signIn(t *testing.T, credential string) {
	t.Helper()
	b.open(t, "/console/login")
	b.do(t, chromedp.SendKeys(chromedp.CSS("#credential"), credential), chromedp.Submit(chromedp.CSS("#credential")), chromedp.WaitVisible(chromedp.CSS("nav")))
}

// screenshot saves the page, when the screenshots are being made, as docs/console/name.png.
func (b *browser) screenshot(t *testing.T, dir, name string) {
	t.Helper()
	if dir == "" {
		return
	}
	png := run(t, b, chromedp.FullScreenshot(100)) // 100: PNG (lower qualities are JPEG)
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// The operator console, driven in a real browser against a whole service on a chain: a
// create shows CONFIRMED with its attempt; a fee bump through the page shows two attempts
// and the chart; an admin action changes the signer's state; a read-only credential sees
// no action and a POST without the session's CSRF token is refused.
func TestConsoleInABrowser(t *testing.T) {
	t.Parallel()
	shots := os.Getenv("CONSOLE_SCREENSHOTS") // make console-screenshots: the folder to write them to
	keys := map[string]string{"ops": "console-ops-key", "reader": "console-reader-key", "alice": "console-alice-key"}
	sim := newTestChain(t, 0)
	var sealing atomic.Bool
	sealing.Store(true)
	stopSealing := make(chan struct{})
	t.Cleanup(func() { close(stopSealing) })
	go func() {
		for {
			select {
			case <-stopSealing:
				return
			case <-time.After(200 * time.Millisecond):
				if sealing.Load() {
					sim.Commit()
				}
			}
		}
	}()
	s := startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Create.ApprovalInterval = conf.Duration(200 * time.Millisecond)
		bc.Resubmit.Interval = conf.Duration(time.Hour) // the fee bump is the operator's, through the page
		bc.Auth = conf.Auth{Enabled: true, Roles: []string{"approver"}, APIKeys: []conf.APIKey{
			{ID: "ops", SHA256: sha256Hex(keys["ops"]), Signers: []string{"*"}, Admin: true},
			{ID: "reader", SHA256: sha256Hex(keys["reader"]), Signers: []string{"*"}},
			{ID: "alice", SHA256: sha256Hex(keys["alice"]), Signers: []string{"*"}, Roles: []string{"approver"}},
		}}
	}})
	create := func(signer int, requestID, value string) string {
		t.Helper()
		body, _ := json.Marshal(map[string]any{"signer": devAddress(t, signer), "to": devAddress(t, 6), "value": value, "gasLimit": 21000, "requestId": requestID})
		a := s.doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", keys["ops"])
		if a.status != http.StatusAccepted {
			t.Fatalf("create %s: %d %s", requestID, a.status, a.raw)
		}
		return a.tx()["txId"].(string)
	}
	signer := devAddress(t, 0)

	ops := newBrowser(t, s.httpURL)
	ops.open(t, "/console")
	if !strings.HasSuffix(mustLocation(t, ops), "/console/login?next=%2Fconsole") {
		t.Fatalf("an unsigned browser at /console is at %s, want the sign-in page", mustLocation(t, ops))
	}
	ops.do(t, chromedp.SendKeys(chromedp.CSS("#credential"), "not-a-key"), chromedp.Submit(chromedp.CSS("#credential")), chromedp.WaitVisible(chromedp.CSS(".flash.bad")))
	if got := ops.text(t, ".flash.bad"); !strings.Contains(got, "not accepted") {
		t.Fatalf("a wrong key's sign-in says %q", got)
	}
	ops.screenshot(t, shots, "login")
	ops.signIn(t, keys["ops"])

	// A create, CONFIRMED on its page with its one attempt.
	confirmed := create(0, "console-confirmed", "1000")
	waitFor(t, 30*time.Second, "the first transaction confirmed", func() bool { return s.tx(t, confirmed).state == "CONFIRMED" })
	ops.open(t, "/console/tx/"+confirmed)
	if got := ops.text(t, "#tx-state"); got != "CONFIRMED" {
		t.Fatalf("the confirmed transaction's page shows %q", got)
	}
	if n := ops.count(t, "tr.attempt"); n != 1 {
		t.Fatalf("the confirmed transaction's page shows %d attempts, want 1", n)
	}
	if timeline := ops.text(t, ".timeline"); !strings.Contains(timeline, "Final: CONFIRMED") || !strings.Contains(timeline, "Mined: succeeded") {
		t.Fatalf("the timeline lacks its mined and final steps:\n%s", timeline)
	}
	ops.screenshot(t, shots, "transaction-confirmed")

	// The overview lists the signers with their state; a completion appears live.
	ops.open(t, "/console")
	if got := ops.text(t, "table"); !strings.Contains(got, "serving") || !strings.Contains(got, signer[:8]) {
		t.Fatalf("the overview's signers table lacks the signer or its state:\n%s", got)
	}
	live := create(1, "console-live", "2000")
	ops.do(t, chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`[data-live-feed] a[href="/console/tx/%s"]`, live))))

	// A fee bump through the page: the transaction waits unmined, the operator replaces it.
	sealing.Store(false)
	bumped := create(0, "console-bumped", "3000")
	waitFor(t, 30*time.Second, "the second transaction broadcast", func() bool { return s.tx(t, bumped).state == "TRACKING" })
	ops.open(t, "/console/tx/"+bumped)
	ops.do(t, chromedp.SetValue(chromedp.CSS("#resolution"), "REPLACE"), chromedp.SendKeys(chromedp.CSS("#resolve-note"), "bump through the console"),
		chromedp.Click(chromedp.CSS(`#resolve ~ form button[type=submit], section.actions button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if got := ops.text(t, ".flash"); !strings.Contains(got, "Resolution REPLACE sent") {
		t.Fatalf("the resolution's answer on the page: %q", got)
	}
	if n := ops.count(t, "tr.attempt"); n != 2 {
		t.Fatalf("after the bump the page shows %d attempts, want 2", n)
	}
	points := eval[string](t, ops, `document.querySelector("svg.chart polyline.series-max").getAttribute("points")`)
	if pts := strings.Fields(points); len(pts) != 2 || !higherOnTheChart(pts[1], pts[0]) {
		t.Fatalf("the fee chart's max-fee line is %q, want two points rising", points)
	}
	if n := ops.count(t, "svg.chart polyline.series-base"); n != 1 {
		t.Fatalf("the chart has %d base-fee lines, want 1", n)
	}
	var first, second string
	if err := s.pool.QueryRow(t.Context(), `SELECT min(max_fee_per_gas)::text, max(max_fee_per_gas)::text FROM tx_attempt WHERE tx_id = $1`, bumped).Scan(&first, &second); err != nil || first == second {
		t.Fatalf("the attempts' fee caps %s and %s (%v): the replacement must pay more", first, second, err)
	}
	ops.screenshot(t, shots, "transaction-fee-bump")
	sealing.Store(true)
	waitFor(t, 30*time.Second, "the bumped transaction confirmed", func() bool { return s.tx(t, bumped).state == "CONFIRMED" })
	ops.open(t, "/console/tx/"+bumped)
	if got := ops.text(t, "#tx-state"); got != "CONFIRMED" {
		t.Fatalf("the bumped transaction's page shows %q after mining", got)
	}

	// An admin action through the page: pausing the signer refuses its creates.
	ops.open(t, "/console/signers/1337/"+signer)
	ops.do(t, chromedp.SendKeys(chromedp.CSS("#signer-note"), "maintenance"), chromedp.Click(chromedp.CSS(`button[value="pause"]`)), chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	if badges := ops.text(t, "#signer-state"); !strings.Contains(badges, "paused") {
		t.Fatalf("the paused signer's page shows %q, want a paused badge", badges)
	}
	body, _ := json.Marshal(map[string]any{"signer": signer, "to": devAddress(t, 6), "value": "1", "gasLimit": 21000})
	if a := s.doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", keys["ops"]); a.status != http.StatusConflict || a.reason() != "SIGNER_PAUSED" {
		t.Fatalf("a create for the signer paused through the console: %d %s, want 409 SIGNER_PAUSED", a.status, a.raw)
	}
	var audited int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM audit_record WHERE actor = 'ops' AND action = 'signer.pause'`).Scan(&audited); err != nil || audited != 1 {
		t.Fatalf("the console's pause left %d audit records (%v), want 1", audited, err)
	}
	ops.screenshot(t, shots, "signer")
	ops.do(t, chromedp.Click(chromedp.CSS(`button[value="resume"]`)), chromedp.WaitVisible(chromedp.CSS(".flash.ok")))

	// Queues, search and the audit trail.
	stuck := create(2, "console-stuck", "4000")
	sealing.Store(false)
	waitFor(t, 30*time.Second, "the third transaction broadcast", func() bool { return s.tx(t, stuck).state == "TRACKING" })
	ops.open(t, "/console/tx/"+stuck)
	ops.do(t, chromedp.SetValue(chromedp.CSS("#resolution"), "NOOP"), chromedp.Click(chromedp.CSS(`section.actions button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
	ops.open(t, "/console/stuck")
	if got := ops.text(t, "table"); !strings.Contains(got, stuck[:8]) {
		t.Fatalf("the stuck queue lacks the transaction marked stuck:\n%s", got)
	}
	ops.screenshot(t, shots, "stuck")
	ops.open(t, "/console/search?q=console-bumped")
	if !strings.HasSuffix(mustLocation(t, ops), "/console/tx/"+bumped) {
		t.Fatalf("a search by request id is at %s, want the transaction's page", mustLocation(t, ops))
	}
	var hash string
	if err := s.pool.QueryRow(t.Context(), `SELECT tx_hash FROM tx_attempt WHERE tx_id = $1 AND kind = 'ORIGINAL'`, bumped).Scan(&hash); err != nil {
		t.Fatal(err)
	}
	ops.open(t, "/console/search?q="+hash)
	if !strings.HasSuffix(mustLocation(t, ops), "/console/tx/"+bumped) {
		t.Fatalf("a search by the replaced attempt's hash is at %s, want the transaction's page", mustLocation(t, ops))
	}
	ops.open(t, "/console/audit")
	if got := ops.text(t, "table"); !strings.Contains(got, "signer.pause") || !strings.Contains(got, "tx.resolve") {
		t.Fatalf("the audit page lacks the console's actions:\n%s", got)
	}
	ops.screenshot(t, shots, "audit")

	// An approval waits for alice, who approves it on the page.
	policy, _ := json.Marshal(map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "1000000", "approvers": 1, "expiresAfter": "1h"}}})
	if a := s.doAs(t, http.MethodPut, "/api/v1/admin/policies/signer/"+devAddress(t, 1), policy, "X-API-Key", keys["ops"]); a.status != http.StatusOK {
		t.Fatalf("set an approval policy: %d %s", a.status, a.raw)
	}
	body, _ = json.Marshal(map[string]any{"signer": devAddress(t, 1), "to": devAddress(t, 6), "value": "5000000", "gasLimit": 21000, "requestId": "console-approval"})
	waiting := s.doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", keys["ops"])
	if waiting.status != http.StatusAccepted || waiting.tx()["state"] != "AWAITING_APPROVAL" {
		t.Fatalf("a create above the approval threshold: %d %s", waiting.status, waiting.raw)
	}
	ops.open(t, "/console/approvals")
	if n := ops.count(t, `button[value="approve"]`); n != 0 {
		t.Fatalf("the requester without the approver role sees %d approve buttons", n)
	}
	ops.screenshot(t, shots, "approvals")

	// A read-only credential sees the pages but no action, and cannot act.
	reader := newBrowser(t, s.httpURL)
	reader.signIn(t, keys["reader"])
	for _, page := range []string{"/console", "/console/signers/1337/" + signer, "/console/tx/" + stuck, "/console/stuck", "/console/quarantines", "/console/approvals"} {
		reader.open(t, page)
		if n := reader.count(t, `form[action="/console/act"]`); n != 0 {
			t.Fatalf("the read-only credential sees %d action forms on %s", n, page)
		}
		if n := reader.count(t, "h1"); n != 1 {
			t.Fatalf("the read-only credential's %s has %d headings, want the page", page, n)
		}
	}
	reader.open(t, "/console/audit")
	if got := reader.text(t, "h1"); !strings.Contains(got, "403") {
		t.Fatalf("the audit trail for a read-only credential: %q, want 403", got)
	}

	// Forged POSTs: without the session's token, or from the read-only credential.
	for _, forged := range []struct {
		name       string
		credential string
		withToken  bool
		want       int
	}{
		{"the admin's session without the token", keys["ops"], false, http.StatusForbidden},
		{"the read-only session without the token", keys["reader"], false, http.StatusForbidden},
		{"the read-only session with its token", keys["reader"], true, http.StatusForbidden},
	} {
		client, token := consoleSession(t, s.httpURL, forged.credential)
		form := url.Values{"action": {"pause"}, "signer": {signer}, "back": {"/console"}}
		if forged.withToken {
			form.Set("csrf", token)
		}
		resp, err := client.PostForm(s.httpURL+"/console/act", form)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != forged.want {
			t.Fatalf("%s: %d, want %d", forged.name, resp.StatusCode, forged.want)
		}
	}
	var paused int
	if err := s.pool.QueryRow(t.Context(), `SELECT count(*) FROM signer_roster WHERE paused_at IS NOT NULL`).Scan(&paused); err != nil || paused != 0 {
		t.Fatalf("%d signers paused after the forged POSTs (%v), want none", paused, err)
	}

	// alice approves on the page; the intent is admitted.
	approver := newBrowser(t, s.httpURL)
	approver.signIn(t, keys["alice"])
	approver.open(t, "/console/approvals")
	approver.do(t, chromedp.Click(chromedp.CSS(`button[value="approve"]`)), chromedp.WaitVisible(chromedp.CSS(".flash")))
	if got := approver.text(t, ".flash"); !strings.Contains(got, "approve") {
		t.Fatalf("alice's approval on the page: %q", got)
	}
	sealing.Store(true)
	approvedID := waiting.tx()["txId"].(string)
	waitFor(t, 30*time.Second, "the approved intent confirmed", func() bool {
		var state string
		_ = s.pool.QueryRow(t.Context(), `SELECT state FROM managed_tx WHERE tx_id = $1`, approvedID).Scan(&state)
		return state == "CONFIRMED"
	})

	// Keyboard and labels: every field has a label, the skip link comes first; a phone's
	// width scrolls tables inside their boxes, not the page.
	ops.open(t, "/console")
	ops.screenshot(t, shots, "overview")
	for _, page := range []string{"/console", "/console/tx/" + bumped, "/console/signers/1337/" + signer, "/console/stuck", "/console/approvals", "/console/search"} {
		ops.open(t, page)
		unlabelled := eval[[]string](t, ops, `Array.from(document.querySelectorAll("input:not([type=hidden]), select, textarea")).filter(e => !e.labels || e.labels.length === 0).map(e => e.name)`)
		if len(unlabelled) > 0 {
			t.Fatalf("%s has fields without a label: %v", page, unlabelled)
		}
		ops.do(t, chromedp.KeyEvent("\t"))
		firstFocus := eval[string](t, ops, `document.activeElement.textContent`)
		if firstFocus != "Skip to content" {
			t.Fatalf("%s: the first Tab reaches %q, want the skip link", page, firstFocus)
		}
	}
	ops.do(t, chromedp.EmulateViewport(390, 844))
	for _, page := range []string{"/console", "/console/tx/" + bumped, "/console/signers/1337/" + signer, "/console/approvals"} {
		ops.open(t, page)
		overflow := eval[bool](t, ops, `document.documentElement.scrollWidth > window.innerWidth + 1`)
		if overflow {
			t.Fatalf("%s at a phone's width scrolls the whole page sideways", page)
		}
	}
	ops.open(t, "/console/tx/"+bumped)
	ops.screenshot(t, shots, "phone-transaction")
}

// higherOnTheChart: an SVG point drawn above another stands for the larger value.
func higherOnTheChart(a, b string) bool {
	var ax, ay, bx, by float64
	_, _ = fmt.Sscanf(a, "%f,%f", &ax, &ay)
	_, _ = fmt.Sscanf(b, "%f,%f", &bx, &by)
	return ay < by && ax > bx
}

func mustLocation(t *testing.T, b *browser) string {
	t.Helper()
	return run(t, b, chromedp.Location())
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// consoleSession signs in over plain HTTP, as a script forging requests would, and returns
// the client holding the session cookie and the session's CSRF token.
func consoleSession(t *testing.T, base, credential string) (*http.Client, string) {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := func(path string) string {
		resp, err := client.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	m := csrfField.FindStringSubmatch(page("/console/login"))
	if m == nil {
		t.Fatal("the sign-in form has no CSRF field")
	}
	resp, err := client.PostForm(base+"/console/login", url.Values{"csrf": {m[1]}, "credential": {credential}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-in over HTTP: %d", resp.StatusCode)
	}
	m = csrfField.FindStringSubmatch(page("/console"))
	if m == nil {
		t.Fatal("the signed-in page has no CSRF field")
	}
	return client, m[1]
}

// A signer whose database lost its last transactions is quarantined; the console shows the
// unknown nonces as a range, and an operator's release through the page lets it serve again
// above them.
func TestConsoleReleasesAQuarantinedSigner(t *testing.T) {
	t.Parallel()
	shots := os.Getenv("CONSOLE_SCREENSHOTS")
	ctx := context.Background()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0
		bc.Recovery.Mode = conf.RecoveryHold // an operator releases it
	}}
	first := startService(t, opts)
	signer := devAddress(t, 0)
	var ids []string
	for i := range 5 {
		ids = append(ids, first.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return first.tx(t, id).state == "CONFIRMED" })
	}
	first.stop(t)
	for _, stmt := range []string{
		"DELETE FROM tx_completions WHERE tx_id IN (SELECT tx_id FROM managed_tx WHERE nonce >= 3)",
		"DELETE FROM tx_attempt WHERE nonce >= 3",
		"DELETE FROM managed_tx WHERE nonce >= 3",
		"UPDATE signer_nonce_cursor SET next_nonce = 3",
	} {
		if _, err := first.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	second := startService(t, opts)
	if refused := second.create(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": "9", "gasLimit": 21000}); refused.status == http.StatusAccepted {
		t.Fatalf("a create for the signer whose rows were lost was admitted: %s", refused.raw)
	}

	b := newBrowser(t, second.httpURL)
	b.open(t, "/console/login")
	b.do(t, chromedp.Click(chromedp.CSS(`button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS("nav")))
	b.open(t, "/console")
	if got := b.text(t, "table"); !strings.Contains(got, "quarantined") {
		t.Fatalf("the overview does not say the signer is quarantined:\n%s", got)
	}
	b.open(t, "/console/quarantines")
	if got := b.text(t, "section.card table"); !strings.Contains(got, "3–4") {
		t.Fatalf("the quarantine page does not show nonces 3-4 as unknown:\n%s", got)
	}
	b.screenshot(t, shots, "quarantines")
	b.do(t, chromedp.SendKeys(chromedp.CSS(`input[name=note]`), "both are ours, checked on chain"), chromedp.Click(chromedp.CSS(`section.card button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(".flash.ok")))
	if got := b.text(t, ".flash.ok"); !strings.Contains(got, "Release") && !strings.Contains(got, "Released") {
		t.Fatalf("the release's answer on the page: %q", got)
	}
	waitFor(t, 30*time.Second, "the signer released", func() bool {
		return second.count(t, "SELECT count(*) FROM signer_quarantine WHERE released_at IS NOT NULL") == 1
	})
	again := second.create(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": "9", "gasLimit": 21000, "requestId": "after-release"})
	if again.status != http.StatusAccepted || again.tx()["nonce"] != "5" {
		t.Fatalf("create after the console's release: %d %s, want 202 at nonce 5", again.status, again.raw)
	}
	var actor string
	if err := second.pool.QueryRow(ctx, `SELECT actor FROM audit_record WHERE action = 'signer.release'`).Scan(&actor); err != nil {
		t.Fatalf("the console's release left no audit record: %v", err)
	}
}

// Sessions follow the credential they were opened with: a JWT signs in like an API key, an
// expired one does not; a credential granted one signer sees that signer only; a session
// cookie changed by hand is no session.
func TestConsoleSessionsFollowTheCredential(t *testing.T) {
	t.Parallel()
	s := startAuthedService(t)
	get := func(client *http.Client, path string) (int, string) {
		t.Helper()
		resp, err := client.Get(s.httpURL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	token := signToken(t, jwt.MapClaims{"sub": "ops-jwt", "iss": "tests", "aud": "txmanager", "txm_admin": true, "signers": []string{"*"},
		"exp": time.Now().Add(time.Hour).Unix()}, jwtSecret)
	admin, _ := consoleSession(t, s.httpURL, token)
	if status, page := get(admin, "/console"); status != http.StatusOK || !strings.Contains(page, "jwt:ops-jwt · admin") || !strings.Contains(page, devAddress(t, 1)) {
		t.Fatalf("a JWT's session: %d, signed in as jwt:ops-jwt with every signer: %v", status, strings.Contains(page, "jwt:ops-jwt"))
	}

	expired := signToken(t, jwt.MapClaims{"sub": "late", "iss": "tests", "aud": "txmanager", "exp": time.Now().Add(-time.Hour).Unix()}, jwtSecret)
	jar, _ := cookiejar.New(nil)
	anon := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	_, login := get(anon, "/console/login")
	resp, err := anon.PostForm(s.httpURL+"/console/login", url.Values{"csrf": {csrfField.FindStringSubmatch(login)[1]}, "credential": {expired}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an expired JWT's sign-in: %d, want 401", resp.StatusCode)
	}

	client, _ := consoleSession(t, s.httpURL, clientKey)
	status, page := get(client, "/console")
	if status != http.StatusOK || !strings.Contains(page, devAddress(t, 0)) || strings.Contains(page, devAddress(t, 1)) {
		t.Fatalf("a credential granted one signer: %d, its signer shown %v, another shown %v", status, strings.Contains(page, devAddress(t, 0)), strings.Contains(page, devAddress(t, 1)))
	}
	if status, _ := get(client, "/console/signers/1337/"+devAddress(t, 1)); status != http.StatusForbidden {
		t.Fatalf("another signer's page for a credential granted one: %d, want 403", status)
	}
	if status, _ := get(client, "/console/audit"); status != http.StatusForbidden {
		t.Fatalf("the audit trail without the admin grant: %d, want 403", status)
	}
	// A search by the hash of another signer's transaction finds nothing, as if it did not
	// exist: no redirect naming it.
	created := s.doAs(t, http.MethodPost, "/api/v1/tx", []byte(`{"signer":"`+devAddress(t, 1)+`","to":"`+devAddress(t, 2)+`","value":"1","gasLimit":21000,"requestId":"console-other-signer"}`), "x-api-key", adminKey)
	otherID, _ := created.body["tx"].(map[string]any)["txId"].(string)
	if created.status != http.StatusAccepted || otherID == "" {
		t.Fatalf("create for another signer: %d %s", created.status, created.raw)
	}
	var otherHash string
	waitFor(t, 30*time.Second, "the other signer's transaction signed", func() bool {
		return s.pool.QueryRow(t.Context(), `SELECT tx_hash FROM tx_attempt WHERE tx_id = $1`, otherID).Scan(&otherHash) == nil
	})
	if status, page := get(client, "/console/search?q="+otherHash); status != http.StatusNotFound || strings.Contains(page, otherID) {
		t.Fatalf("a search by another signer's transaction hash: %d, names it %v; want 404", status, strings.Contains(page, otherID))
	}
	if status, _ := get(admin, "/console/search?q="+otherHash); status != http.StatusSeeOther {
		t.Fatalf("the same search by a credential granted every signer: %d, want 303 to the transaction", status)
	}

	u, _ := url.Parse(s.httpURL + "/console")
	for _, c := range client.Jar.Cookies(u) {
		if c.Name == "txm_console" {
			forged := []byte(c.Value)
			forged[10] ^= 1
			jar.SetCookies(u, []*http.Cookie{{Name: "txm_console", Value: string(forged), Path: "/console"}})
		}
	}
	if status, _ := get(anon, "/console"); status != http.StatusSeeOther {
		t.Fatalf("a changed session cookie: %d, want 303 to the sign-in page", status)
	}
}

// Signing out ends the session on every node, also for a copy of its cookie taken before
// (a shared machine, a copied cookie): two nodes share a database and the console's secret,
// a copy of a session opened on the first is served by the second until the session signs
// out on the first, and refused by both after. Signing in again opens a new session.
func TestConsoleSignOutEndsTheSessionEverywhere(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "console.secret")
	if err := os.WriteFile(secret, []byte(strings.Repeat("s", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	sim := newTestChain(t, 250*time.Millisecond)
	opts := serviceOptions{chain: sim, signers: 1, dsn: testsupport.MigratedDSN(t), configure: func(bc *conf.Bootstrap) {
		bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{{ID: "ops", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true}}}
		bc.Console.SessionSecretFile = secret
	}}
	first, second := startService(t, opts), startService(t, opts)
	get := func(client *http.Client, base string) int {
		t.Helper()
		resp, err := client.Get(base + "/console")
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	browser, csrf := consoleSession(t, first.httpURL, adminKey)
	u, _ := url.Parse(first.httpURL + "/console")
	copyJar, _ := cookiejar.New(nil)
	copyJar.SetCookies(u, browser.Jar.Cookies(u))
	copied := &http.Client{Jar: copyJar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if status := get(copied, second.httpURL); status != http.StatusOK {
		t.Fatalf("a copy of the session's cookie on the other node before signing out: %d, want 200", status)
	}

	resp, err := browser.PostForm(first.httpURL+"/console/logout", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/console/login" {
		t.Fatalf("sign-out: %d to %q, want 303 to /console/login", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, node := range []*testService{first, second} {
		if status := get(copied, node.httpURL); status != http.StatusSeeOther {
			t.Fatalf("the copied cookie after signing out, on %s: %d, want 303 to the sign-in page", node.nodeID, status)
		}
	}
	var ended int
	if err := first.pool.QueryRow(t.Context(), `SELECT count(*) FROM console_session_ended WHERE expires_at > now()`).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("sessions listed as signed out: %d, %v; want 1", ended, err)
	}
	again, _ := consoleSession(t, second.httpURL, adminKey)
	if status := get(again, second.httpURL); status != http.StatusOK {
		t.Fatalf("a new session after signing out: %d, want 200", status)
	}
}
