-- name: EnqueueOutbox :one
INSERT INTO payout_outbox (payout_id) VALUES ($1) RETURNING id;

-- name: ClaimDueOutbox :many
-- Rows locked here stay locked until the relay's transaction ends, after the sends: a
-- second relay skips them instead of sending them again.
SELECT o.id, o.payout_id, o.attempts, p.to_address, p.amount::text AS amount
FROM payout_outbox o
JOIN payouts p ON p.id = o.payout_id
WHERE o.sent_at IS NULL AND o.available_at <= now()
ORDER BY o.created_at
LIMIT sqlc.arg(max_rows)
FOR UPDATE OF o SKIP LOCKED;

-- name: MarkOutboxSent :execrows
UPDATE payout_outbox SET sent_at = now(), attempts = attempts + 1, last_error = sqlc.narg(last_error)
WHERE id = $1 AND sent_at IS NULL;

-- name: DeferOutbox :execrows
UPDATE payout_outbox
SET attempts = attempts + 1, last_error = sqlc.arg(last_error)::text,
    available_at = now() + make_interval(secs => sqlc.arg(backoff_seconds)::float8)
WHERE id = sqlc.arg(id) AND sent_at IS NULL;
