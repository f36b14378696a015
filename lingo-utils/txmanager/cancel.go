package txmanager

import (
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultCancelGrace is how long CancelStatementsOnTimeout waits, after asking the server to
// cancel a statement, for the server's answer before it closes the connection.
const DefaultCancelGrace = time.Second

// CancelStatementsOnTimeout makes the pool's connections end a statement whose context ends
// (a transaction's timeout, the caller's deadline or cancellation) by asking the server to
// cancel it, and close the connection only if the server has not answered within grace
// (DefaultCancelGrace when 0 or less).
//
// pgx's default closes the socket at once and sends nothing. The server goes on running the
// statement, with its transaction's locks held, until it next writes to the socket, which
// may be long after WithinTx returned the timeout; and the rollback WithinTx sends after a
// failure finds the connection closed. With the cancel, the statement ends at once, the
// rollback runs on the same connection, and the locks are free when WithinTx returns. A
// server that does not answer (the network is gone) costs the caller up to grace past its
// deadline. Call it on the configuration before pgxpool.NewWithConfig.
func CancelStatementsOnTimeout(cfg *pgxpool.Config, grace time.Duration) {
	if grace <= 0 {
		grace = DefaultCancelGrace
	}
	cfg.ConnConfig.BuildContextWatcherHandler = func(conn *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: conn, DeadlineDelay: grace}
	}
}
