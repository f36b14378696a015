-- name: InsertPayout :one
INSERT INTO payouts (idempotency_key, to_address, amount)
VALUES (sqlc.narg(idempotency_key), sqlc.arg(to_address), (sqlc.arg(amount)::text)::numeric)
RETURNING id;

-- name: GetPayout :one
SELECT id, idempotency_key, to_address, amount::text AS amount, status, tx_id, tx_hash, failure_reason, created_at, updated_at
FROM payouts WHERE id = $1;

-- name: PayoutIDByIdempotencyKey :one
SELECT id FROM payouts WHERE idempotency_key = sqlc.arg(idempotency_key)::text;

-- name: RecordSubmission :execrows
-- The relay records the transaction; a payout the consumer already finalised (its
-- completion overtook the relay after a crash) keeps its final status.
UPDATE payouts
SET tx_id = sqlc.arg(tx_id)::text,
    status = CASE WHEN status = 'PENDING' THEN 'SUBMITTED' ELSE status END,
    updated_at = now()
WHERE id = sqlc.arg(id) AND (tx_id IS NULL OR tx_id = sqlc.arg(tx_id)::text);

-- name: MarkRejected :execrows
-- txmanager refused the intent for good: no transaction exists, nothing was paid.
UPDATE payouts
SET status = 'FAILED', failure_reason = sqlc.arg(reason), updated_at = now()
WHERE id = sqlc.arg(id) AND status = 'PENDING';

-- name: FinalizeByTxID :one
-- Only an unfinished payout moves: PAID and FAILED are terminal.
UPDATE payouts
SET status = sqlc.arg(status), tx_hash = sqlc.narg(tx_hash), failure_reason = sqlc.narg(failure_reason), updated_at = now()
WHERE tx_id = sqlc.arg(tx_id)::text AND status IN ('PENDING', 'SUBMITTED')
RETURNING id;

-- name: FinalizeByOutboxID :one
-- The completion overtook the relay (a crash after the send, before it was recorded): the
-- requestId, which is the outbox id, still names the payout.
UPDATE payouts p
SET status = sqlc.arg(status), tx_id = sqlc.arg(tx_id)::text, tx_hash = sqlc.narg(tx_hash),
    failure_reason = sqlc.narg(failure_reason), updated_at = now()
FROM payout_outbox o
WHERE o.id = sqlc.arg(outbox_id) AND p.id = o.payout_id AND p.status IN ('PENDING', 'SUBMITTED')
RETURNING p.id;

-- name: PayoutIDByTxID :one
SELECT id FROM payouts WHERE tx_id = sqlc.arg(tx_id)::text;

-- name: InsertAppliedCompletion :exec
INSERT INTO payout_completions (tx_id, payout_id, status, feed_cursor)
VALUES ($1, $2, $3, $4);
