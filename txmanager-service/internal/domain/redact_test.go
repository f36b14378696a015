package domain_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func TestRedactURLs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"no URL", "kms: key projects/p/keys/k is disabled", "kms: key projects/p/keys/k is disabled"},
		{"a key in the path", `Post "https://mainnet.infura.io/v3/KEY123": EOF`, `Post "https://mainnet.infura.io/…": EOF`},
		{"credentials and a query token", `Post "https://ops:***@clef.internal:8550/v1/APIKEY?token=TOK": refused`, `Post "https://clef.internal:8550/…": refused`},
		{"a password the parser refuses", `parse "http://admin:S3cr^t@clef:8550/": net/url: invalid userinfo`, `parse "http://clef:8550": net/url: invalid userinfo`},
		{"unquoted, host only", "dial ws://127.0.0.1:8546 failed", "dial ws://127.0.0.1:8546 failed"},
		{"two URLs", "a https://h1/x?k=1 b http://u:p@h2/y", "a https://h1/… b http://h2/…"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := domain.RedactURLs(tc.in); got != tc.want {
				t.Errorf("RedactURLs(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
	cause := errors.New(`Post "https://h/KEY": refused`)
	err := domain.WithoutURLs(cause)
	if strings.Contains(err.Error(), "KEY") || !errors.Is(err, cause) {
		t.Errorf("WithoutURLs: %q (errors.Is %v), want the key gone and the cause kept", err, errors.Is(err, cause))
	}
	if domain.WithoutURLs(nil) != nil {
		t.Error("WithoutURLs(nil) is not nil")
	}
}
