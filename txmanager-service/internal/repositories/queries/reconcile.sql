-- name: SignerChainCheck :one
-- What each reconciliation pass compares with the chain, in one read: the signer's next
-- nonce on record, its live quarantine if any (the nonces it covers and how far its
-- recovery got), and whether a recovered row's adoption window has ended (judged by the
-- database clock, as the update that ends it).
SELECT COALESCE((SELECT next_nonce FROM signer_nonce_cursor c WHERE c.chain_id = @chain_id AND c.signer = @signer), -1)::bigint AS next_nonce,
       q.db_next_nonce AS quarantined_from, q.chain_nonce AS quarantined_to,
       COALESCE(q.recorded_to, q.db_next_nonce, 0)::bigint AS recorded_to, q.scan_from_block, q.recorded_count, q.detected_at,
       (q.release_requested_at IS NOT NULL)::bool AS release_requested,
       EXISTS (SELECT 1 FROM managed_tx m WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.unclaimed_until <= now())::bool AS unclaimed_expired
FROM (SELECT 1) AS one
LEFT JOIN signer_quarantine q ON q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL;

-- name: LowestOpenNonce :one
-- The signer's lowest nonce not yet final: everything above waits for it, and a nonce hole
-- lies below it.
SELECT COALESCE(min(nonce), -1)::bigint AS nonce
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL;

-- name: InsertPlaceholders :one
-- Fill nonce holes: zero-value self-transfers at nonces below the signer's open ones that
-- no transaction of ours or anyone's holds. They go through the pipeline like any
-- allocation. A row that appeared at one of those nonces meanwhile wins (unique signer,
-- nonce); the cursor is above them already.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
inserted AS (
    INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, placeholder, fencing_token, created_at, updated_at)
    SELECT @chain_id, t.tx_id::uuid, @signer, t.intent_hash, t.nonce, t.payload::jsonb, 'ALLOCATED', 'PLACEHOLDER', true, @fencing_token, now(), now()
    FROM lease, (
        SELECT unnest(@tx_ids::text[])         AS tx_id,
               unnest(@nonces::bigint[])       AS nonce,
               unnest(@intent_hashes::bytea[]) AS intent_hash,
               unnest(@payloads::text[])       AS payload
    ) AS t
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM inserted)::bigint AS inserted;

-- name: ListNonceTaken :many
-- Broadcasts answered "nonce too low" while none of their attempts is known to the node:
-- the nonce went to a transaction the database has no attempt for, to be identified.
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL AND state IN ('TRACKING', 'STUCK') AND receipt IS NULL AND sub_state = 'NONCE_TAKEN'
ORDER BY nonce
LIMIT @max_rows;

-- name: FailNonceTaken :one
-- Another transaction, not this one's intent, was mined at its nonce and is confirmed: the
-- intent can never execute. Final as FAILED_FINAL/NONCE_TAKEN with its completion.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
failed AS (
    UPDATE managed_tx m
    SET state = 'FAILED_FINAL', sub_state = 'NONCE_TAKEN', last_error = @reason, confirmed_at = now(), next_resubmit_at = NULL,
        fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL AND m.sub_state = 'NONCE_TAKEN'
    RETURNING m.chain_id, m.tx_id, m.signer, m.state, m.unclaimed_until
),
-- A recovered row still adoptable gets its completion when it is adopted (naming the
-- request) or when its window ends, as finality holds it back too.
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM failed WHERE unclaimed_until IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM failed)::bigint AS updated;

-- name: RecordRecovered :one
-- Records transactions the chain holds at nonces the database lost (recovery after a
-- database loss), fenced: each becomes a row of its own, TRACKING with the chain's signed
-- bytes as its attempt, so receipts and finality follow it like any other, unclaimed until
-- @unclaimed_until for a retried create with the same recovery key to adopt. A nonce that
-- already has a row (recorded by an earlier pass) is left as it is.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])          AS tx_id,
           unnest(@nonces::bigint[])        AS nonce,
           unnest(@payloads::text[])::jsonb AS payload,
           unnest(@intent_hashes::bytea[])  AS intent_hash,
           unnest(@recovery_keys::bytea[])  AS recovery_key,
           unnest(@tx_hashes::text[])       AS tx_hash,
           unnest(@max_fees::text[])        AS max_fee,
           unnest(@max_tips::text[])        AS max_tip,
           unnest(@gas_limits::bigint[])    AS gas_limit,
           unnest(@raw_txs::bytea[])        AS raw_tx
),
inserted AS (
    INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, tx_hash, state, sub_state, submit_attempts,
                            last_submit_at, next_resubmit_at, fencing_token, recovered_at, recovery_key, unclaimed_until)
    SELECT @chain_id, i.tx_id::uuid, @signer, i.intent_hash, i.nonce, i.payload, i.tx_hash, 'TRACKING', 'RECOVERED', 1,
           now(), now() + make_interval(secs => @resubmit_after_seconds::float8), @fencing_token, now(), i.recovery_key, @unclaimed_until::timestamptz
    FROM lease, input i
    ON CONFLICT (chain_id, signer, nonce) DO NOTHING
    RETURNING tx_id, nonce
),
attempts AS (
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, i.tx_hash, n.tx_id, @signer, i.nonce, 'ORIGINAL', i.max_fee::numeric, i.max_tip::numeric, i.gas_limit, i.raw_tx, @fencing_token
    FROM inserted n JOIN input i ON i.nonce = n.nonce
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
),
-- The recovery's progress moves with the rows it covers, in the same statement: every nonce
-- below @recorded_to has its row, and the next scan starts at @scan_from_block. The nonces
-- covered never go back; the scan's start may (a start found too late is moved earlier).
progress AS (
    UPDATE signer_quarantine q
    SET recorded_to = GREATEST(COALESCE(q.recorded_to, q.db_next_nonce), @recorded_to::bigint),
        scan_from_block = @scan_from_block::bigint,
        recorded_count = q.recorded_count + (SELECT count(*) FROM inserted)
    FROM lease
    WHERE q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM inserted)::bigint AS inserted,
       EXISTS (SELECT 1 FROM progress) AS progressed;

-- name: FinishRecovery :one
-- Once every unknown nonce has its row: the cursor moves past the chain's nonce (never
-- back) and the quarantine is released by the recovery itself, in one fenced statement, so
-- the signer serves again with nothing between the two.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
advanced AS (
    INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, fencing_token, updated_at)
    SELECT @chain_id, @signer, @chain_nonce::bigint, @fencing_token, now()
    FROM lease
    ON CONFLICT (chain_id, signer) DO UPDATE SET next_nonce = EXCLUDED.next_nonce, fencing_token = EXCLUDED.fencing_token, updated_at = now()
    WHERE c.next_nonce < EXCLUDED.next_nonce
    RETURNING 1
),
released AS (
    -- An operator's release request is carried out here: released by them, with their note
    -- followed by what recovery recorded.
    UPDATE signer_quarantine q SET released_at = now(),
        released_by = COALESCE(q.release_requested_by, @released_by::text),
        release_note = CASE WHEN q.release_requested_at IS NULL THEN @note::text ELSE COALESCE(q.release_request_note, '') || '; ' || @note::text END
    FROM lease
    WHERE q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL AND q.chain_nonce <= @chain_nonce::bigint
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM released)::bigint AS released;

-- name: ExpireUnclaimed :one
-- Recovered rows no request adopted within the window stop being adoptable; those already
-- final get the completion that was held back for the adopter. At most @max_rows a call,
-- lowest nonces first: a large loss's windows end in bounded statements, a pass at a time.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
expired AS (
    UPDATE managed_tx m SET unclaimed_until = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id IN (
            SELECT u.tx_id FROM managed_tx u
            WHERE u.chain_id = @chain_id AND u.signer = @signer AND u.unclaimed_until IS NOT NULL AND u.unclaimed_until <= now()
            ORDER BY u.nonce
            LIMIT @max_rows)
      AND m.chain_id = @chain_id AND m.signer = @signer AND m.unclaimed_until IS NOT NULL AND m.unclaimed_until <= now()
    RETURNING m.chain_id, m.tx_id, m.signer, m.state
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM expired WHERE state IN ('CONFIRMED', 'FAILED_FINAL')
    ON CONFLICT (tx_id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM expired)::bigint AS expired;

-- name: QuarantinedAmong :many
-- Which of the signers are quarantined now (the quarantine gauge, at each scrape).
SELECT signer FROM signer_quarantine WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND released_at IS NULL;

-- name: RecoveryAnchors :many
-- Where a recovery's forward scan may start: the signer's transactions on record just below
-- the first unknown nonce, newest first, with the block each was mined in when known. A
-- transaction at a lower nonce was mined no later than the unknown ones.
-- Retention's anchor stands in for the rows it deleted.
SELECT a.nonce, a.tx_hash, a.block_number FROM (
    (SELECT m.nonce, COALESCE(m.tx_hash, '')::text AS tx_hash, COALESCE(m.block_number, 0)::bigint AS block_number
     FROM managed_tx m
     WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.nonce < @below AND m.tx_hash IS NOT NULL
     ORDER BY m.nonce DESC
     LIMIT @max_rows)
    UNION ALL
    SELECT p.nonce, p.tx_hash, p.block_number
    FROM signer_pruned_anchor p
    WHERE p.chain_id = @chain_id AND p.signer = @signer AND p.nonce < @below
) a
ORDER BY a.nonce DESC
LIMIT @max_rows;
