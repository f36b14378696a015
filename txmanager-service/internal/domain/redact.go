package domain

import (
	"regexp"
	"strings"
)

// urlInText matches a URL inside free text: its scheme, any credentials, its host, and the
// rest (path, query, fragment) up to a space or a quote.
var urlInText = regexp.MustCompile(`([a-zA-Z][a-zA-Z0-9+.-]*)://([^\s"'<>/?#@]*@)?([^\s"'<>/?#]+)([^\s"'<>]*)`)

// RedactURLs tells every URL in s by its scheme and host alone. Credentials go in the
// userinfo, API keys in the path (https://host/v3/<key>, a webhook's secret path) or the
// query (?token=...), and Go's HTTP client and URL parser quote the whole URL in their
// errors, which reach logs, API answers and stored rows.
func RedactURLs(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlInText.ReplaceAllStringFunc(s, func(match string) string {
		parts := urlInText.FindStringSubmatch(match)
		told := parts[1] + "://" + parts[3]
		if parts[4] != "" && parts[4] != "/" {
			told += "/…"
		}
		return told
	})
}

// WithoutURLs is err told with its URLs redacted (RedactURLs); errors.Is and errors.As
// still see err. Nil stays nil.
func WithoutURLs(err error) error {
	if err == nil {
		return nil
	}
	msg := RedactURLs(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
