-- The operator console's reads. Each is one index look-up or a bounded range of one index,
-- so a page costs the same at a million transactions as at a hundred.

-- name: ConsoleSignerTxs :many
-- Newest first through the (chain_id, signer, nonce) unique index, read backwards.
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND nonce < @before_nonce
ORDER BY nonce DESC
LIMIT @max_rows;

-- name: ConsoleOpenTxs :many
-- The signer's queue through the partial index of unfinished transactions.
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL
ORDER BY nonce
LIMIT @max_rows;

-- name: ConsoleTxAttempts :many
SELECT tx_hash, kind, max_fee_per_gas::text AS max_fee, max_priority_fee_per_gas::text AS max_tip,
       COALESCE(base_fee_per_gas::text, '')::text AS base_fee, gas_limit, created_at
FROM tx_attempt
WHERE tx_id = @tx_id
ORDER BY created_at, tx_hash;

-- name: ConsoleTxCompletedAt :one
SELECT completed_at FROM tx_completions WHERE tx_id = @tx_id;

-- name: ConsoleTxIDByHash :one
-- Every hash a transaction was broadcast under is an attempt's primary key (its current
-- one included: it is recorded as an attempt when it is signed).
SELECT tx_id FROM tx_attempt WHERE tx_hash = @tx_hash;

-- name: ConsoleTxsByRequestID :many
-- A request id is unique per signer: one probe of the (chain_id, signer, request_id) index
-- per signer that ever allocated a nonce, instead of an index on request_id alone that
-- every create would pay for.
SELECT m.* FROM signer_nonce_cursor c
CROSS JOIN LATERAL (
    SELECT * FROM managed_tx t
    WHERE t.chain_id = c.chain_id AND t.signer = c.signer AND t.request_id = @request_id
    LIMIT 1
) m
ORDER BY m.created_at DESC
LIMIT @max_rows;

-- name: ConsoleRecentAudit :many
SELECT seq, at, actor, action, subject FROM audit_record ORDER BY seq DESC LIMIT @max_rows;
