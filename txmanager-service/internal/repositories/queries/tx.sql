-- name: InsertManagedTxs :execrows
-- One fenced statement inserts a writer batch's transactions for one signer. request_id ''
-- stands for "none" because a text[] parameter cannot carry NULLs here.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease
    WHERE signer = @signer AND owner_node = @node_id AND fencing_token = @fencing_token AND expires_at > now()
    FOR SHARE
)
INSERT INTO managed_tx (tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token, created_at, updated_at)
SELECT t.tx_id, @signer, NULLIF(t.request_id, ''), t.intent_hash, t.nonce, t.payload, 'ALLOCATED', @fencing_token, @created_at, @created_at
FROM lease, (
    SELECT unnest(@tx_ids::uuid[])          AS tx_id,
           unnest(@request_ids::text[])     AS request_id,
           unnest(@intent_hashes::bytea[])  AS intent_hash,
           unnest(@nonces::bigint[])        AS nonce,
           unnest(@payloads::jsonb[])       AS payload
) AS t;

-- name: FindTxsByRequestIDs :many
SELECT * FROM managed_tx
WHERE signer = @signer AND request_id = ANY(@request_ids::text[]);

-- name: GetTxByID :one
SELECT * FROM managed_tx WHERE tx_id = @tx_id;

-- name: GetTxByRequestID :one
SELECT * FROM managed_tx WHERE signer = @signer AND request_id = @request_id;
