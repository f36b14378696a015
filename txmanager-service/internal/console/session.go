package console

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// A session cookie carries the credential it was opened with, sealed (AES-256-GCM) under
// the console's secret: no session table to share between nodes, and the credential is
// authenticated again on every request, so removing a key or a JWT's expiry ends its
// sessions at once. Only the sessions signed out before their end are stored, so that
// every node refuses them (ConsoleStore.EndSession).
const (
	sessionCookie = "txm_console"
	// loginCookie holds the sign-in form's CSRF token before there is a session.
	loginCookie = "txm_console_login"
	cookiePath  = "/console"
)

// credential kinds a session carries.
const (
	credentialAPIKey = "key"
	credentialJWT    = "jwt"
	credentialNone   = "none" // authentication disabled (development)
)

type session struct {
	ID         string `json:"id"`
	Kind       string `json:"k"`
	Credential string `json:"c"`
	Expires    int64  `json:"e"`
	// Seen is when the operator last used the session (unix seconds), to end it after
	// idleTimeout without use; 0 in a cookie sealed before it was kept, which the next use
	// stamps.
	Seen int64 `json:"s,omitempty"`
}

// sealer seals and opens session cookies and derives CSRF tokens.
type sealer struct {
	aead    cipher.AEAD
	csrfKey []byte
	ttl     time.Duration
	// idle ends a session not used for this long (0: only its ttl ends it).
	idle time.Duration
	now  func() time.Time
}

// errIdle: the session was not used for longer than the idle timeout. read answers it with
// the session, which may still be signed out.
var errIdle = errors.New("the session was not used for too long")

// newSealer derives the cookie key and the CSRF key from the secret file's contents, or
// from random bytes when there is no file (sessions then live as long as the process).
func newSealer(secretFile string, ttl, idle time.Duration) (*sealer, error) {
	secret := make([]byte, 32)
	if secretFile == "" {
		if _, err := rand.Read(secret); err != nil {
			return nil, fmt.Errorf("console session secret: %w", err)
		}
	} else {
		raw, err := os.ReadFile(secretFile)
		if err != nil {
			return nil, fmt.Errorf("console.sessionSecretFile: %w", err)
		}
		secret = []byte(strings.TrimSpace(string(raw)))
		if len(secret) < 32 {
			return nil, errors.New("console.sessionSecretFile: the secret must be at least 32 bytes")
		}
	}
	sealKey := derive(secret, "txm console session")
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, fmt.Errorf("console session cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("console session cipher: %w", err)
	}
	return &sealer{aead: aead, csrfKey: derive(secret, "txm console csrf"), ttl: ttl, idle: idle, now: time.Now}, nil
}

func derive(secret []byte, purpose string) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(purpose))
	return m.Sum(nil)
}

// open starts a session for a credential.
func (s *sealer) open(kind, credential string) (session, string, error) {
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return session{}, "", err
	}
	now := s.now()
	sess := session{ID: base64.RawURLEncoding.EncodeToString(id), Kind: kind, Credential: credential, Expires: now.Add(s.ttl).Unix(), Seen: now.Unix()}
	sealed, err := s.seal(sess)
	return sess, sealed, err
}

// seal is a session's cookie value.
func (s *sealer) seal(sess session) (string, error) {
	plain, err := json.Marshal(sess)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, s.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	sealed := s.aead.Seal(nonce, nonce, plain, []byte(sessionCookie))
	return base64.RawURLEncoding.EncodeToString(sealed), nil
}

// touchEvery is how stale a session's Seen may get before a request seals it again: the
// idle timeout is kept to this precision, and a page does not re-seal its cookie at every
// request.
func (s *sealer) touchEvery() time.Duration { return min(s.idle/4, time.Minute) }

// touch is sess used now: its cookie sealed again when its Seen is older than touchEvery
// (ok false: the cookie it came in is good as it is).
func (s *sealer) touch(sess session) (session, string, bool, error) {
	now := s.now()
	if s.idle <= 0 || (sess.Seen > 0 && now.Sub(time.Unix(sess.Seen, 0)) < s.touchEvery()) {
		return sess, "", false, nil
	}
	sess.Seen = now.Unix()
	sealed, err := s.seal(sess)
	return sess, sealed, err == nil, err
}

var errNoSession = errors.New("no session")

// read opens a session cookie's value; a cookie that does not open or has expired is no
// session.
func (s *sealer) read(value string) (session, error) {
	sealed, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(sealed) < s.aead.NonceSize() {
		return session{}, errNoSession
	}
	plain, err := s.aead.Open(nil, sealed[:s.aead.NonceSize()], sealed[s.aead.NonceSize():], []byte(sessionCookie))
	if err != nil {
		return session{}, errNoSession
	}
	var sess session
	if err := json.Unmarshal(plain, &sess); err != nil || sess.ID == "" {
		return session{}, errNoSession
	}
	if s.now().Unix() >= sess.Expires {
		return session{}, errNoSession
	}
	if s.idle > 0 && sess.Seen > 0 && s.now().Unix()-sess.Seen >= int64(s.idle.Seconds()) {
		return sess, errIdle
	}
	return sess, nil
}

// csrfToken is the token every form of a session carries: bound to the session, so a
// token from another session (or none) is refused.
func (s *sealer) csrfToken(sessionID string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("csrf:" + sessionID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// flashMAC signs a one-line message a page shows after an action (key "done" or "error"),
// for one session: a message in a link someone else made is not shown on the console.
func (s *sealer) flashMAC(sessionID, key, message string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte("flash:" + sessionID + "\x00" + key + "\x00" + message))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// validFlash reports whether mac is the session's signature of the message.
func (s *sealer) validFlash(sessionID, key, message, mac string) bool {
	return sessionID != "" && message != "" && mac != "" && subtle.ConstantTimeCompare([]byte(s.flashMAC(sessionID, key, message)), []byte(mac)) == 1
}

// validCSRF compares a form's token with the session's in constant time.
func (s *sealer) validCSRF(sessionID, token string) bool {
	want := s.csrfToken(sessionID)
	return token != "" && subtle.ConstantTimeCompare([]byte(want), []byte(token)) == 1
}

// randomToken is a fresh unguessable token (the sign-in form's).
func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
