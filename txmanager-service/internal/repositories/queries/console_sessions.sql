-- name: EndConsoleSession :exec
-- Lists a signed-out session until it would have ended anyway, and removes the rows of
-- sessions an hour past that (signing out is rare; no worker is needed to keep the table
-- small). The hour is for nodes whose clocks run behind the database's: each judges a
-- session's end by its own.
WITH pruned AS (
    DELETE FROM console_session_ended WHERE expires_at < now() - interval '1 hour'
)
INSERT INTO console_session_ended (session_id, expires_at)
VALUES (@session_id, @expires_at)
ON CONFLICT (session_id) DO NOTHING;

-- name: ConsoleSessionEnded :one
SELECT EXISTS (SELECT 1 FROM console_session_ended WHERE session_id = @session_id) AS ended;
