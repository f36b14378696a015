-- name: QuarantineSigner :one
-- Records (fenced) that the chain holds nonces of the signer the database does not know. A
-- quarantine an operator released is replaced only when the chain has moved past what was
-- released: the released nonces are known now. Returns whether the signer is quarantined
-- (recorded now, or already by a concurrent check).
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
recorded AS (
    INSERT INTO signer_quarantine AS q (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token)
    SELECT @chain_id, @signer, @db_next_nonce, @chain_nonce, @node_id, @fencing_token FROM lease
    ON CONFLICT (chain_id, signer) DO UPDATE SET
        db_next_nonce = EXCLUDED.db_next_nonce, chain_nonce = EXCLUDED.chain_nonce, detected_at = now(),
        detected_by = EXCLUDED.detected_by, fencing_token = EXCLUDED.fencing_token,
        released_at = NULL, released_by = NULL, release_note = NULL
    WHERE q.released_at IS NOT NULL AND EXCLUDED.chain_nonce > q.chain_nonce
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held,
       (EXISTS (SELECT 1 FROM recorded) OR EXISTS (SELECT 1 FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL))::bool AS quarantined;

-- name: GetQuarantine :one
SELECT q.signer, q.db_next_nonce, q.chain_nonce, q.detected_at, q.detected_by, q.fencing_token,
       q.released_at, COALESCE(q.released_by, '')::text AS released_by, COALESCE(q.release_note, '')::text AS release_note
FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.signer = @signer;

-- name: ReleaseQuarantine :execrows
-- An operator confirmed the unknown nonces: allocation goes on above them (the chain term
-- takes the next nonce from the chain).
UPDATE signer_quarantine SET released_at = now(), released_by = @released_by, release_note = @note
WHERE chain_id = @chain_id AND signer = @signer AND released_at IS NULL;

-- name: ListRecovered :many
-- The rows recovery recorded at a quarantine's unknown nonces (the admin listing shows
-- whether a retried create adopted each).
SELECT nonce, tx_id, COALESCE(request_id, '')::text AS request_id, unclaimed_until
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND nonce = ANY(@nonces::bigint[]) AND recovered_at IS NOT NULL;
