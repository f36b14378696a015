package console

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

//go:embed assets templates
var files embed.FS

// Path is where the console is served.
const Path = "/console"

// Authenticate establishes the principal of a request's credentials, as the API does.
type Authenticate func(header func(string) string) (domain.Principal, error)

// RateLimitedError is Authenticate's answer for a credential past its rate limit: the
// console's pages count against the same limit as the API's calls.
type RateLimitedError struct{ RetryAfterSeconds int }

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("rate limit of this credential exceeded; retry after %d seconds", e.RetryAfterSeconds)
}

// Console serves the operator console.
type Console struct {
	enabled     bool
	authEnabled bool
	seal        *sealer
	chains      *services.Chains
	store       services.ConsoleStore
	roster      *services.SignerRoster
	approvals   *services.ApprovalDesk
	completions *services.CompletionsUseCase
	tx          *controllers.TxController
	admin       *controllers.AdminController
	pages       map[string]*template.Template
	// ended are the sessions this node knows were signed out.
	ended endedSessions
	log   *log.Helper
}

// New builds the console.
func New(c conf.Console, auth conf.Auth, chains *services.Chains, store services.ConsoleStore, roster *services.SignerRoster, approvals *services.ApprovalDesk,
	completions *services.CompletionsUseCase, tx *controllers.TxController, admin *controllers.AdminController, logger log.Logger) (*Console, error) {
	seal, err := newSealer(c.SessionSecretFile, c.SessionTTL.Std(), c.IdleTimeout.Std())
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	return &Console{enabled: c.Enabled, authEnabled: auth.Enabled, seal: seal, chains: chains, store: store, roster: roster, approvals: approvals,
		completions: completions, tx: tx, admin: admin, pages: pages, log: log.NewHelper(log.With(logger, "component", "console"))}, nil
}

// Enabled reports whether the console is served.
func (c *Console) Enabled() bool { return c.enabled }

// viewer is the signed-in operator of one request.
type viewer struct {
	domain.Principal
	session session
	csrf    string
}

// Handler serves every console path; auth authenticates the credential a session carries.
func (c *Console) Handler(auth Authenticate) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /console/assets/", http.StripPrefix("/console/", assetServer()))
	mux.HandleFunc("GET /console/login", c.loginPage)
	mux.HandleFunc("POST /console/login", func(w http.ResponseWriter, r *http.Request) { c.login(w, r, auth) })
	signedIn := func(page func(http.ResponseWriter, *http.Request, viewer)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) { c.withViewer(w, r, auth, page) }
	}
	mux.HandleFunc("POST /console/logout", signedIn(c.logout))
	mux.HandleFunc("GET /console", signedIn(c.overview))
	mux.HandleFunc("GET /console/{$}", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, Path, http.StatusMovedPermanently) })
	mux.HandleFunc("GET /console/signers/{chain}/{signer}", signedIn(c.signerPage))
	mux.HandleFunc("GET /console/tx/{id}", signedIn(c.txPage))
	mux.HandleFunc("GET /console/stuck", signedIn(c.stuckPage))
	mux.HandleFunc("GET /console/quarantines", signedIn(c.quarantinesPage))
	mux.HandleFunc("GET /console/approvals", signedIn(c.approvalsPage))
	mux.HandleFunc("GET /console/audit", signedIn(c.auditPage))
	mux.HandleFunc("GET /console/search", signedIn(c.search))
	mux.HandleFunc("GET /console/live", signedIn(c.live))
	mux.HandleFunc("POST /console/act", signedIn(c.act))
	mux.HandleFunc("/console/", func(w http.ResponseWriter, r *http.Request) {
		c.problem(w, r, viewer{}, http.StatusNotFound, "No such page.")
	})
	return securityHeaders(mux)
}

// securityHeaders: no framing (clickjacking of the action buttons), no scripts but our own,
// nothing cached that a shared machine's next user could read; and, reached over TLS, no
// plain HTTP for a year (a session cookie sent in the clear is a session anyone can use).
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		if secure(r) {
			h.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, "/console/assets/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// withViewer authenticates the session's credential, or sends the browser to sign in.
func (c *Console) withViewer(w http.ResponseWriter, r *http.Request, auth Authenticate, page func(http.ResponseWriter, *http.Request, viewer)) {
	v, err := c.viewerOf(r, auth)
	var limited *RateLimitedError
	if errors.As(err, &limited) {
		w.Header().Set("Retry-After", strconv.Itoa(limited.RetryAfterSeconds))
		c.problem(w, r, viewer{}, http.StatusTooManyRequests, fmt.Sprintf("Too many requests from this credential: try again in %d seconds.", limited.RetryAfterSeconds))
		return
	}
	var unchecked *sessionCheckError
	if errors.As(err, &unchecked) {
		c.log.Warnw("msg", "a console session could not be checked against the signed-out list", "error", unchecked.err.Error())
		c.problem(w, r, viewer{}, http.StatusServiceUnavailable, "This session could not be checked just now: try again in a moment.")
		return
	}
	if err != nil {
		if r.Method == http.MethodGet && r.URL.Path != "/console/live" {
			target := "/console/login?next=" + url.QueryEscape(r.URL.RequestURI())
			if errors.Is(err, errIdle) {
				target += "&ended=idle"
			}
			http.Redirect(w, r, target, http.StatusSeeOther)
			return
		}
		c.problem(w, r, viewer{}, http.StatusUnauthorized, "Sign in again: "+err.Error())
		return
	}
	// A request of the operator's keeps the session from ending idle; the live feed, which
	// an open page asks for by itself, does not (it only stamps a cookie sealed before
	// sessions kept their last use), nor does signing out, which an idle session may still
	// ask for and which must not hand it a fresh cookie if refused.
	live, logout := r.URL.Path == "/console/live", r.URL.Path == "/console/logout"
	if !logout && (!live || v.session.Seen == 0) {
		if sess, sealed, touched, err := c.seal.touch(v.session); err == nil && touched {
			v.session = sess
			http.SetCookie(w, c.sessionCookie(r, sess, sealed))
		}
	}
	page(w, r, v)
}

func (c *Console) viewerOf(r *http.Request, auth Authenticate) (viewer, error) {
	cookie, err := r.Cookie(sessionCookie)
	if err != nil {
		return viewer{}, errNoSession
	}
	sess, err := c.seal.read(cookie.Value)
	if errors.Is(err, errIdle) && r.Method == http.MethodPost && r.URL.Path == "/console/logout" {
		// Signing out an idle session still lists it as ended: its cookie, or a copy, would
		// otherwise open again where the idle timeout is longer (or off).
		err = nil
	}
	if err != nil {
		return viewer{}, err
	}
	// The credential first: its rate limit holds for a signed-out session's cookie too,
	// before the database is asked about it.
	p, err := auth(headersOf(sess))
	var limited *RateLimitedError
	if errors.As(err, &limited) {
		return viewer{}, err
	}
	if err != nil {
		return viewer{}, fmt.Errorf("the credential of this session is no longer accepted")
	}
	if err := c.checkNotSignedOut(r.Context(), sess); err != nil {
		return viewer{}, err
	}
	return viewer{Principal: p, session: sess, csrf: c.seal.csrfToken(sess.ID)}, nil
}

// sessionCheckTimeout bounds the look-up of a session in the signed-out list: a page waits
// no longer than this on a database that does not answer.
const sessionCheckTimeout = 2 * time.Second

// checkNotSignedOut refuses a session signed out on any node. A session once ended never
// comes back, so one seen ended is remembered here and not looked up again.
func (c *Console) checkNotSignedOut(ctx context.Context, sess session) error {
	if c.ended.has(sess.ID) {
		return errSignedOut
	}
	ctx, cancel := context.WithTimeout(ctx, sessionCheckTimeout)
	defer cancel()
	ended, err := c.store.SessionEnded(ctx, sess.ID)
	switch {
	case err != nil:
		return &sessionCheckError{err: err}
	case ended:
		c.ended.add(sess.ID, time.Unix(sess.Expires, 0))
		return errSignedOut
	}
	return nil
}

// endedSessions are the sessions this node knows were signed out, each until it would
// have ended anyway.
type endedSessions struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// maxRememberedEnded bounds endedSessions: past it, the ended ones past their end are
// dropped first, and then the list starts again (the database still has every one).
const maxRememberedEnded = 10_000

func (e *endedSessions) add(id string, until time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.until) >= maxRememberedEnded {
		now := time.Now()
		for old, end := range e.until {
			if now.After(end) {
				delete(e.until, old)
			}
		}
		if len(e.until) >= maxRememberedEnded {
			e.until = nil
		}
	}
	if e.until == nil {
		e.until = map[string]time.Time{}
	}
	e.until[id] = until
}

func (e *endedSessions) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.until[id]
	return ok
}

// errSignedOut: the session was signed out, in this browser or with a copy of its cookie.
var errSignedOut = errors.New("this session was signed out")

// sessionCheckError: whether the session was signed out could not be read. The request is
// refused: serving it could serve a session that was ended.
type sessionCheckError struct{ err error }

func (e *sessionCheckError) Error() string {
	return "the session could not be checked: " + e.err.Error()
}

// headersOf presents a session's credential as the API's headers carry it.
func headersOf(sess session) func(string) string {
	return func(name string) string {
		switch {
		case name == "x-api-key" && sess.Kind == credentialAPIKey:
			return sess.Credential
		case name == "authorization" && sess.Kind == credentialJWT:
			return "Bearer " + sess.Credential
		}
		return ""
	}
}

// requestContext is the request's context as the API's controllers expect it: with the
// caller established, its credential for a forward to the signer's owner (which checks it
// again), and a deadline.
func requestContext(r *http.Request, v viewer) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	return controllers.WithCallerHeaders(domain.WithPrincipal(ctx, v.Principal), headersOf(v.session)), cancel
}

// problem renders an error page with the status.
func (c *Console) problem(w http.ResponseWriter, r *http.Request, v viewer, status int, message string) {
	c.render(w, r, v, status, "problem", map[string]any{"Status": status, "StatusText": http.StatusText(status), "Message": message})
}

// render writes a page of the layout.
func (c *Console) render(w http.ResponseWriter, r *http.Request, v viewer, status int, name string, data any) {
	t, ok := c.pages[name]
	if !ok {
		http.Error(w, "no page "+name, http.StatusInternalServerError)
		return
	}
	var buf strings.Builder
	page := map[string]any{"Viewer": v, "SignedIn": v.session.ID != "", "CSRF": v.csrf, "Data": data, "Path": r.URL.Path,
		"Flash": c.flash(r, v, "done"), "FlashError": c.flash(r, v, "error"), "AuthEnabled": c.authEnabled}
	if err := t.ExecuteTemplate(&buf, "layout", page); err != nil {
		c.log.Errorw("msg", "console page failed to render", "page", name, "error", err.Error())
		http.Error(w, "the page failed to render", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(buf.String()))
}

// flash is the page's one-line message under key, when this console signed it for the
// viewer's session after an action: a message written into a link is not shown.
func (c *Console) flash(r *http.Request, v viewer, key string) string {
	q := r.URL.Query()
	if message := q.Get(key); c.seal != nil && c.seal.validFlash(v.session.ID, key, message, q.Get("flash")) {
		return message
	}
	return ""
}

// failed renders a use case's error with the status the API would answer. The cause of a
// failure to read stays in the log: it may name the database's host or a statement.
func (c *Console) failed(w http.ResponseWriter, r *http.Request, v viewer, err error) {
	status, message := c.statusOf(r, err)
	c.problem(w, r, v, status, message)
}

func (c *Console) statusOf(r *http.Request, err error) (int, string) {
	var validation *domain.ValidationError
	switch {
	case errors.Is(err, domain.ErrNotFound):
		return http.StatusNotFound, "Not found."
	case errors.As(err, &validation):
		return http.StatusBadRequest, validation.Error()
	case errors.Is(err, errForbidden):
		return http.StatusForbidden, err.Error()
	}
	c.log.Warnw("msg", "a console page could not be read", "path", r.URL.Path, "error", err.Error())
	return http.StatusServiceUnavailable, "The page could not be read now; try again in a moment (the service's log has the cause)."
}

var errForbidden = errors.New("this credential may not see that")
