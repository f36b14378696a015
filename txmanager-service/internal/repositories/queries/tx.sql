-- name: WriteAllocation :one
-- One fenced statement writes a writer batch's allocation for one signer: the new
-- transactions and the advanced cursor (never backwards). Both data-modifying parts read the
-- same lease row, locked FOR KEY SHARE, so either both land or neither does. request_id ''
-- stands for "none" because a text[] parameter cannot carry NULLs here.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
inserted AS (
    INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token, created_at, updated_at)
    SELECT @chain_id, t.tx_id::uuid, @signer, NULLIF(t.request_id, ''), t.intent_hash, t.nonce, t.payload, 'ALLOCATED', @fencing_token, @created_at, @created_at
    FROM lease, (
        SELECT unnest(@tx_ids::text[])          AS tx_id,
               unnest(@request_ids::text[])     AS request_id,
               unnest(@intent_hashes::bytea[])  AS intent_hash,
               unnest(@nonces::bigint[])        AS nonce,
               unnest(@payloads::text[])::jsonb AS payload
    ) AS t
    RETURNING 1
),
advanced AS (
    INSERT INTO signer_nonce_cursor AS c (chain_id, signer, next_nonce, fencing_token, updated_at)
    SELECT @chain_id, @signer, @next_nonce::bigint, @fencing_token, now()
    FROM lease
    ON CONFLICT (chain_id, signer) DO UPDATE SET
        next_nonce    = EXCLUDED.next_nonce,
        fencing_token = EXCLUDED.fencing_token,
        updated_at    = now()
    WHERE c.next_nonce <= EXCLUDED.next_nonce
    RETURNING next_nonce
)
SELECT (SELECT count(*) FROM inserted)::bigint AS inserted,
       (SELECT count(*) FROM advanced)::bigint AS cursor_advanced;

-- name: FindTxsByRequestIDs :many
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND request_id = ANY(@request_ids::text[]);

-- name: GetTxByID :one
SELECT * FROM managed_tx WHERE tx_id = @tx_id;

-- name: GetTxByRequestID :one
SELECT * FROM managed_tx WHERE chain_id = @chain_id AND signer = @signer AND request_id = @request_id;
