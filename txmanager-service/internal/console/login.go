package console

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// loginPage shows the sign-in form with a fresh CSRF token in a cookie of its own (there is
// no session yet to bind it to).
func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	message := ""
	if r.FormValue("ended") == "idle" {
		message = fmt.Sprintf("Your session ended after %s without use. Sign in again.", c.seal.idle)
	}
	c.renderLogin(w, r, http.StatusOK, message)
}

func (c *Console) renderLogin(w http.ResponseWriter, r *http.Request, status int, failure string) {
	token := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: token, Path: cookiePath, HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode, MaxAge: 600})
	c.render(w, r, viewer{}, status, "login", map[string]any{"LoginCSRF": token, "Next": safeNext(r.FormValue("next")), "Failure": failure})
}

// login opens a session for an API key or a JWT the API accepts.
func (c *Console) login(w http.ResponseWriter, r *http.Request, auth Authenticate) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, viewer{}, http.StatusBadRequest, "The form could not be read.")
		return
	}
	cookie, err := r.Cookie(loginCookie)
	if err != nil || subtle.ConstantTimeCompare([]byte(cookie.Value), []byte(r.PostFormValue("csrf"))) != 1 || cookie.Value == "" {
		c.problem(w, r, viewer{}, http.StatusForbidden, "The sign-in form expired or did not come from this console; load it again.")
		return
	}
	credential := strings.TrimSpace(r.PostFormValue("credential"))
	kind := credentialAPIKey
	switch {
	case !c.authEnabled:
		kind, credential = credentialNone, ""
	case credential == "":
		c.renderLogin(w, r, http.StatusUnauthorized, "Enter an API key or a token.")
		return
	case looksLikeJWT(credential):
		kind = credentialJWT
	}
	sess, sealed, err := c.seal.open(kind, credential)
	if err != nil {
		c.problem(w, r, viewer{}, http.StatusServiceUnavailable, "A session could not be opened.")
		return
	}
	if _, err := auth(headersOf(sess)); err != nil {
		c.renderLogin(w, r, http.StatusUnauthorized, "That credential is not accepted here.")
		return
	}
	session := c.sessionCookie(r, sess, sealed)
	if len(session.String()) > maxCookieBytes {
		// Browsers drop a larger cookie without a word, and the operator would be sent back
		// here as if signing in had worked.
		c.renderLogin(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"This credential is too large for a browser session (%d bytes sealed, browsers keep at most %d): use an API key, or a token granting fewer signers by name (or \"*\").",
			len(session.String()), maxCookieBytes))
		return
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: cookiePath, MaxAge: -1})
	http.SetCookie(w, session)
	http.Redirect(w, r, safeNext(r.PostFormValue("next")), http.StatusSeeOther)
}

// maxCookieBytes is the largest cookie browsers keep (RFC 6265's minimum that every major
// browser holds to, name and attributes included).
const maxCookieBytes = 4096

// logout ends the session everywhere: listed as signed out in the database, every node
// refuses it, also from a copy of the cookie taken before. The browser's cookie is dropped
// only once that is on record, so a sign-out that did not take says so.
func (c *Console) logout(w http.ResponseWriter, r *http.Request, v viewer) {
	if !c.seal.validCSRF(v.session.ID, r.PostFormValue("csrf")) {
		c.problem(w, r, v, http.StatusForbidden, "The form did not carry this session's token.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	if err := c.store.EndSession(ctx, v.session.ID, time.Unix(v.session.Expires, 0)); err != nil {
		c.log.Warnw("msg", "a console session could not be signed out", "error", err.Error())
		c.problem(w, r, v, http.StatusServiceUnavailable, "The session could not be ended just now, and is still open: try again in a moment.")
		return
	}
	c.ended.add(v.session.ID, time.Unix(v.session.Expires, 0))
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: cookiePath, MaxAge: -1})
	http.Redirect(w, r, "/console/login", http.StatusSeeOther)
}

// looksLikeJWT: three base64url parts, the first a JSON object ("eyJ" is `{"`).
func looksLikeJWT(s string) bool {
	return strings.HasPrefix(s, "eyJ") && strings.Count(s, ".") == 2
}

// safeNext keeps a redirect after sign-in inside the console.
func safeNext(next string) string {
	if strings.HasPrefix(next, "/console") && !strings.HasPrefix(next, "//") && !strings.ContainsAny(next, "\\\r\n") {
		return next
	}
	return Path
}

// sessionCookie carries a sealed session until the session's end.
func (c *Console) sessionCookie(r *http.Request, sess session, sealed string) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: sealed, Path: cookiePath, HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteStrictMode,
		MaxAge: int(max(sess.Expires-c.seal.now().Unix(), 1))}
}

// secure marks cookies Secure when the browser reached us over TLS (directly or through a
// proxy that says so).
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}
