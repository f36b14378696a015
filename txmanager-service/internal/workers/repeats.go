package workers

import (
	"regexp"
	"sync"
	"time"
)

// repeatedWarnings keeps a failure that repeats every pass from filling the log: a signer
// whose key is disabled, or whose node refuses every call, fails the same way each second
// for as long as it lasts. The same text for the same key is let through once per
// repeatEvery, with how many times it was held back since.
type repeatedWarnings struct {
	mu   sync.Mutex
	last map[string]warned
}

type warned struct {
	text string
	at   time.Time
	held int
}

// repeatEvery is how often a warning that keeps repeating is logged again.
const repeatEvery = time.Minute

// maxWarnKeys bounds what is kept (signers come and go); past it the oldest are forgotten.
const maxWarnKeys = 10_000

// requestIDs match the ids a remote service gives each call (AWS's "RequestID: ...", UUIDs):
// the same failure carries a new one every time.
var requestIDs = regexp.MustCompile(`(?i)(request ?id:?\s*)[^\s,;)]+|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// sameFailure is text as repeats are compared: without the ids of the calls.
func sameFailure(text string) string { return requestIDs.ReplaceAllString(text, "${1}…") }

// allow reports whether the warning text for key is logged at now, and how many times the
// same failure (its text but for call ids) was held back since it last was.
func (r *repeatedWarnings) allow(key, text string, now time.Time) (bool, int) {
	text = sameFailure(text)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.last == nil {
		r.last = map[string]warned{}
	}
	prev, ok := r.last[key]
	if ok && prev.text == text && now.Sub(prev.at) < repeatEvery {
		prev.held++
		r.last[key] = prev
		return false, 0
	}
	if len(r.last) >= maxWarnKeys {
		r.forgetOlderThan(now.Add(-repeatEvery))
	}
	r.last[key] = warned{text: text, at: now}
	if ok && prev.text == text {
		return true, prev.held
	}
	return true, 0
}

// passed forgets key's warning: the next failure, even the same, is logged at once.
func (r *repeatedWarnings) passed(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.last, key)
}

func (r *repeatedWarnings) forgetOlderThan(cutoff time.Time) {
	for k, w := range r.last {
		if w.at.Before(cutoff) {
			delete(r.last, k)
		}
	}
}
