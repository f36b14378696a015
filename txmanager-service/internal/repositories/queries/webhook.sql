-- name: InsertSubscription :one
-- A cursor of 0 (from the start) is stored as the last position retention deleted, read in
-- this statement: a stored cursor is always a position, so one that retention later passes
-- is found expired, whether the subscription began at the start or at an empty feed's head.
INSERT INTO webhook_subscription (subscription_id, url, secret, filter, description, cursor, event_cursor, created_by, batch_size)
VALUES (@subscription_id, @url, @secret, @filter::jsonb, @description,
    CASE WHEN @cursor::bigint = 0 THEN (SELECT pruned_through FROM feed_sequencer) ELSE @cursor::bigint END,
    @event_cursor, @created_by, @batch_size)
RETURNING cursor;

-- name: GetSubscription :one
SELECT subscription_id, url, filter::text AS filter, description, state, cursor, created_at, created_by, last_success_at, failing_since, last_error, delivered,
       COALESCE(owner_node, '')::text AS owner_node, batch_size
FROM webhook_subscription WHERE subscription_id = @subscription_id;

-- name: ListSubscriptions :many
SELECT subscription_id, url, filter::text AS filter, description, state, cursor, created_at, created_by, last_success_at, failing_since, last_error, delivered,
       COALESCE(owner_node, '')::text AS owner_node, batch_size
FROM webhook_subscription ORDER BY created_at, subscription_id;

-- name: CountSubscriptions :one
SELECT count(*)::bigint FROM webhook_subscription;

-- name: CountDeadSubscriptions :one
-- Subscriptions that gave up delivering (the dead-subscriptions gauge, at each scrape).
SELECT count(*)::bigint FROM webhook_subscription WHERE state = 'dead';

-- name: SetSubscriptionState :execrows
-- Pausing, resuming or reviving a subscription; the token moves on, so the node delivering
-- it stops at its next write.
UPDATE webhook_subscription SET state = @state, fencing_token = fencing_token + 1, owner_node = NULL, lease_expires_at = NULL,
    failing_since = CASE WHEN @state::text = 'active' THEN NULL ELSE failing_since END
WHERE subscription_id = @subscription_id;

-- name: ReplaySubscription :one
-- Delivery starts again after cursor (and, from 0, every service event again too); the
-- node delivering it stops at its next write. A dead subscription is delivered again (a
-- replay is how an operator answers its death); a paused one stays paused until resumed.
-- From the start (0) is stored as the last position retention deleted, as at insert.
UPDATE webhook_subscription SET cursor = CASE WHEN @cursor::bigint = 0 THEN (SELECT pruned_through FROM feed_sequencer) ELSE @cursor::bigint END, event_cursor = CASE WHEN @cursor::bigint = 0 THEN 0 ELSE event_cursor END, fencing_token = fencing_token + 1, owner_node = NULL, lease_expires_at = NULL, failing_since = NULL,
    state = CASE WHEN state = 'dead' THEN 'active' ELSE state END
WHERE subscription_id = @subscription_id
RETURNING cursor;

-- name: DeleteSubscription :execrows
DELETE FROM webhook_subscription WHERE subscription_id = @subscription_id;

-- name: ClaimSubscriptions :many
-- This node renews the active subscriptions it holds and takes up to max_new whose lease is
-- free or expired, its own included (a node cut off past its lease, or restarted under the
-- same id); a taken lease gets the next token. Answers every one it now holds, as the
-- updates left them: the statement's own snapshot still has the tokens from before.
WITH free AS (
    SELECT f.subscription_id FROM webhook_subscription f
    WHERE f.state = 'active' AND (f.lease_expires_at IS NULL OR f.lease_expires_at < now())
    ORDER BY f.subscription_id LIMIT @max_new
    FOR UPDATE
),
taken AS (
    UPDATE webhook_subscription s SET owner_node = sqlc.arg(node_id)::text, fencing_token = s.fencing_token + 1, lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
    FROM free WHERE s.subscription_id = free.subscription_id
    RETURNING s.subscription_id, s.url, s.secret, s.filter::text AS filter, s.cursor, s.event_cursor, s.fencing_token, s.failing_since, s.batch_size
),
renewed AS (
    UPDATE webhook_subscription s SET lease_expires_at = now() + make_interval(secs => @lease_seconds::float8)
    WHERE s.owner_node = sqlc.arg(node_id)::text AND s.state = 'active' AND s.lease_expires_at > now()
    RETURNING s.subscription_id, s.url, s.secret, s.filter::text AS filter, s.cursor, s.event_cursor, s.fencing_token, s.failing_since, s.batch_size
)
SELECT * FROM taken
UNION ALL
SELECT * FROM renewed;

-- name: AdvanceSubscription :execrows
-- The cursor moves on only with the lease this node holds, and never back.
UPDATE webhook_subscription
SET cursor = @cursor, delivered = delivered + @delivered, last_success_at = CASE WHEN @delivered::bigint > 0 THEN now() ELSE last_success_at END,
    -- A failure is cleared only while the subscription's other stream is not failing.
    failing_since = CASE WHEN @clear_failure::bool THEN NULL ELSE failing_since END,
    last_error = CASE WHEN @clear_failure::bool THEN '' ELSE last_error END
WHERE subscription_id = @subscription_id AND owner_node = @node_id AND fencing_token = @fencing_token AND lease_expires_at > now() AND cursor <= @cursor;

-- name: RecordDeliveryFailure :one
-- A failed delivery: when failures have lasted past dead_after, the subscription is dead.
UPDATE webhook_subscription
SET failing_since = COALESCE(failing_since, now()), last_error = @last_error,
    state = CASE WHEN COALESCE(failing_since, now()) < now() - make_interval(secs => @dead_after_seconds::float8) THEN 'dead' ELSE state END
WHERE subscription_id = @subscription_id AND owner_node = @node_id AND fencing_token = @fencing_token AND lease_expires_at > now()
RETURNING state;

-- name: ReleaseSubscriptions :exec
-- A node stopping lets its subscriptions go at once.
UPDATE webhook_subscription SET owner_node = NULL, lease_expires_at = NULL WHERE owner_node = @node_id;
