-- Console sessions signed out before their end. A session cookie carries its credential
-- sealed and has no row behind it, so signing out used to drop only the copy in that
-- browser: a copy taken earlier (a shared machine, a copied cookie) stayed good until the
-- session's end. Every node refuses a session listed here. A row is kept until the session
-- would have ended anyway; a later sign-out removes the rows an hour past that.
CREATE TABLE IF NOT EXISTS console_session_ended (
    session_id text        PRIMARY KEY,
    ended_at   timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS console_session_ended_expires_idx ON console_session_ended (expires_at);
