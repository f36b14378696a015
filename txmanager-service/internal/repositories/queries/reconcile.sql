-- name: SignerChainCheck :one
-- What the periodic check compares with the chain: the signer's next nonce on record and
-- whether it is quarantined now.
SELECT COALESCE((SELECT next_nonce FROM signer_nonce_cursor c WHERE c.chain_id = @chain_id AND c.signer = @signer), -1)::bigint AS next_nonce,
       EXISTS (SELECT 1 FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL)::bool AS quarantined;

-- name: LowestOpenNonce :one
-- The signer's lowest nonce not yet final: everything above waits for it, and a nonce hole
-- lies below it.
SELECT COALESCE(min(nonce), -1)::bigint AS nonce
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND state IN ('ALLOCATED', 'TRACKING', 'STUCK');

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
WHERE chain_id = @chain_id AND signer = @signer AND state IN ('TRACKING', 'STUCK') AND receipt IS NULL AND sub_state = 'NONCE_TAKEN'
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
    RETURNING m.chain_id, m.tx_id, m.signer, m.state
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM failed
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM completed)::bigint AS updated;
