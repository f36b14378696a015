-- name: AppendEvent :exec
-- The next position, under the sequencer's row lock until commit; an event id recorded
-- already keeps its row (the position taken is then skipped).
WITH seq AS (
    UPDATE event_sequencer SET last_position = last_position + 1 WHERE id RETURNING last_position
)
INSERT INTO service_event (position, event_id, kind, chain_id, signer, payload)
SELECT last_position, @event_id, @kind, @chain_id, @signer, @payload::jsonb FROM seq
ON CONFLICT (event_id) DO NOTHING;

-- name: ListEventsAfter :many
SELECT position, event_id, kind, chain_id, signer, payload::text AS payload, at
FROM service_event
WHERE position > @after_position
  AND (sqlc.arg(all_signers)::bool OR signer = ANY(sqlc.arg(signers)::text[]))
ORDER BY position
LIMIT @page_size;

-- name: PruneEvents :execrows
-- One retention batch of service events older than the horizon by the database's clock,
-- oldest first. Events are not the authoritative record (completions and the tables are);
-- a subscription paused or dead for longer than the horizon does not receive them. None an
-- active subscription has still to deliver is deleted while a node delivers it (its lease
-- taken, a delivery made or failed within the horizon; a node stopping releases its leases):
-- service events carry no mark of what retention took, so its
-- delivery would skip them without a word, and a node that delivers no webhooks may run
-- retention with a horizon shorter than webhooks.deadAfter. One no node has delivered for
-- a horizon (webhooks off everywhere) holds nothing, or the table would grow for ever.
DELETE FROM service_event WHERE position IN (
    SELECT position FROM service_event
    WHERE at < now() - make_interval(secs => sqlc.arg(horizon_seconds)::float8)
      AND position <= coalesce((SELECT min(event_cursor) FROM webhook_subscription
                                WHERE state = 'active'
                                  AND greatest(lease_expires_at, last_success_at, failing_since, created_at) > now() - make_interval(secs => sqlc.arg(horizon_seconds)::float8)),
                               9223372036854775807)
    ORDER BY position
    LIMIT @batch_size
);

-- name: EventHead :one
SELECT last_position FROM event_sequencer WHERE id;

-- name: AdvanceEventCursor :execrows
-- The events cursor moves on only with the lease this node holds, and never back.
UPDATE webhook_subscription SET event_cursor = @cursor, delivered = delivered + @delivered,
    last_success_at = CASE WHEN @delivered::bigint > 0 THEN now() ELSE last_success_at END,
    -- A failure is cleared only while the subscription's other stream is not failing.
    failing_since = CASE WHEN @clear_failure::bool THEN NULL ELSE failing_since END,
    last_error = CASE WHEN @clear_failure::bool THEN '' ELSE last_error END
WHERE subscription_id = @subscription_id AND owner_node = @node_id AND fencing_token = @fencing_token AND lease_expires_at > now() AND event_cursor <= @cursor;

-- name: PutFunding :exec
INSERT INTO signer_funding (chain_id, signer, low_water, high_water, treasury, updated_by)
VALUES (@chain_id, @signer, CAST(sqlc.arg(low_water)::text AS numeric), CAST(sqlc.arg(high_water)::text AS numeric), sqlc.narg(treasury), @updated_by)
ON CONFLICT (chain_id, signer) DO UPDATE SET low_water = EXCLUDED.low_water, high_water = EXCLUDED.high_water, treasury = EXCLUDED.treasury,
    updated_at = now(), updated_by = EXCLUDED.updated_by;

-- name: GetFunding :one
SELECT chain_id, signer, low_water::text AS low_water, high_water::text AS high_water, COALESCE(treasury, '')::text AS treasury, state,
       COALESCE(last_balance::text, '')::text AS last_balance, refill_tx_id, refills, updated_at, updated_by
FROM signer_funding WHERE chain_id = @chain_id AND signer = @signer;

-- name: ListFunding :many
SELECT chain_id, signer, low_water::text AS low_water, high_water::text AS high_water, COALESCE(treasury, '')::text AS treasury, state,
       COALESCE(last_balance::text, '')::text AS last_balance, refill_tx_id, refills, updated_at, updated_by
FROM signer_funding WHERE chain_id = @chain_id ORDER BY signer;

-- name: DeleteFunding :execrows
DELETE FROM signer_funding WHERE chain_id = @chain_id AND signer = @signer;

-- name: LockFunding :one
-- A look at a signer's balance starts by locking its row: looks from several nodes take
-- turns, and each sees the state the one before left, so each crossing is seen once.
SELECT state FROM signer_funding WHERE chain_id = @chain_id AND signer = @signer FOR UPDATE;

-- name: MarkBalance :one
-- Under low_water the signer is low, at high_water again ok; answers the state after it and
-- whether a refill is in flight: its transaction not final, or its intent waiting for the
-- treasury's approvers (an approval admitted has its transaction under the same id, or under
-- admitted_tx_id when it adopted one the chain held already).
UPDATE signer_funding f SET last_balance = CAST(sqlc.arg(balance)::text AS numeric),
    state = CASE WHEN CAST(sqlc.arg(balance)::text AS numeric) < f.low_water THEN 'low'
                 WHEN CAST(sqlc.arg(balance)::text AS numeric) >= f.high_water THEN 'ok' ELSE f.state END
WHERE f.chain_id = sqlc.arg(chain_id)::bigint AND f.signer = sqlc.arg(signer)::text
RETURNING f.state AS after, f.low_water::text AS low_water, f.high_water::text AS high_water, COALESCE(f.treasury, '')::text AS treasury, f.refills,
    (f.refill_tx_id IS NOT NULL AND (
        EXISTS (SELECT 1 FROM managed_tx m WHERE m.tx_id = f.refill_tx_id AND m.state NOT IN ('CONFIRMED', 'FAILED_FINAL'))
        OR EXISTS (SELECT 1 FROM tx_approval a WHERE a.approval_id = f.refill_tx_id AND (a.state IN ('AWAITING_APPROVAL', 'APPROVED')
            OR (a.state = 'ADMITTED' AND EXISTS (SELECT 1 FROM managed_tx m WHERE m.tx_id = a.admitted_tx_id AND m.state NOT IN ('CONFIRMED', 'FAILED_FINAL')))))))::bool AS refill_in_flight;

-- name: RecordRefill :execrows
-- A refill sent: the next one waits for it; refills counts them so each has its own request id.
UPDATE signer_funding SET refill_tx_id = @refill_tx_id, refills = refills + 1
WHERE chain_id = @chain_id AND signer = @signer AND refills = @refills;
