package txmanager

import (
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Texts of pgx's errors that print a statement's value: an argument it could not encode
// (extended protocol, batches), and pgtype's own refusal, which the simple protocol returns
// without the argument's position and CopyFrom sends to the server, which quotes it back.
const (
	encodeFailure = "failed to encode args["
	unableEncode  = "unable to encode "
)

// withheldText is err's text for logs and spans, with the values it would carry withheld.
// Two kinds of error print a statement's values: pgx's failure to encode an argument (it
// prints the Go value: a token, a password, a card number) and PostgreSQL's data exceptions,
// SQLSTATE class 22, which quote the input they refused. Each is replaced, wherever it sits
// in err's chain, by its kind and position; the error returned to the caller is unchanged.
func withheldText(err error) string {
	text := err.Error()
	walkChain(err, func(e error) bool {
		own := e.Error()
		//nolint:errorlint // the chain is walked one error at a time: this one's own text is replaced
		if pgErr, ok := e.(*pgconn.PgError); ok && strings.HasPrefix(pgErr.Code, "22") {
			text = strings.ReplaceAll(text, own, pgErr.Severity+": a data exception, its message withheld as it may quote a value (SQLSTATE "+pgErr.Code+")")
			return false
		}
		if end := strings.Index(own, "]"); strings.HasPrefix(own, encodeFailure) && end > 0 {
			text = strings.ReplaceAll(text, own, own[:end+1]+": the value withheld")
			return false
		}
		if at := strings.Index(own, unableEncode); at >= 0 {
			// Also inside a server's error: CopyFrom sends pgtype's refusal as the reason the
			// COPY failed, and the server's 57014 quotes it back.
			withheld := own[:at] + "unable to encode a value (withheld)"
			//nolint:errorlint // as above
			if pgErr, ok := e.(*pgconn.PgError); ok {
				withheld += " (SQLSTATE " + pgErr.Code + ")"
			}
			text = strings.ReplaceAll(text, own, withheld)
			return false
		}
		return true
	})
	return text
}
