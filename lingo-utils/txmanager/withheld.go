package txmanager

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// encodeFailure is how pgx begins the error of an argument it could not encode; what follows
// prints the argument's value.
const encodeFailure = "failed to encode args["

// withheldText is err's text for logs and spans, with the values it would carry withheld.
// Two kinds of error print a statement's values: pgx's failure to encode an argument (it
// prints the Go value: a token, a password, a card number) and PostgreSQL's data exceptions,
// SQLSTATE class 22, which quote the input they refused. Each is replaced, wherever it sits
// in err's chain, by its kind and position; the error returned to the caller is unchanged.
func withheldText(err error) string {
	text := err.Error()
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		pgErr, isPgErr := e.(*pgconn.PgError)
		switch own := e.Error(); {
		case isPgErr && strings.HasPrefix(pgErr.Code, "22"):
			text = strings.ReplaceAll(text, own, pgErr.Severity+": a data exception, its message withheld as it may quote a value (SQLSTATE "+pgErr.Code+")")
			return
		case strings.HasPrefix(own, encodeFailure):
			if end := strings.Index(own, "]"); end > 0 {
				text = strings.ReplaceAll(text, own, own[:end+1]+": the value withheld")
				return
			}
		}
		switch u := e.(type) {
		case interface{ Unwrap() error }:
			walk(u.Unwrap())
		case interface{ Unwrap() []error }:
			for _, inner := range u.Unwrap() {
				walk(inner)
			}
		}
	}
	walk(err)
	return text
}
