-- name: QuarantineSigner :one
-- Records (fenced) that the chain holds nonces of the signer the database does not know. A
-- quarantine an operator released is replaced only when the chain has moved past what was
-- released: the released nonces are known now. Returns whether the signer is quarantined
-- (recorded now, or already, by this check or a concurrent one).
--
-- The answer comes from the row the upsert wrote or found, never from a separate read: when
-- two checks run at once (the allocator's and the reconciler's), the second waits for the
-- first's insert and then finds its row through ON CONFLICT, which sees the committed row,
-- while a plain read in the same statement would use the snapshot from before that commit
-- and answer "not quarantined": the signer was then served above the unknown nonces. An
-- unreleased quarantine is therefore "updated" to itself, so that RETURNING reports it.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
recorded AS (
    INSERT INTO signer_quarantine AS q (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token)
    SELECT @chain_id, @signer, @db_next_nonce, @chain_nonce, @node_id, @fencing_token FROM lease
    ON CONFLICT (chain_id, signer) DO UPDATE SET
        db_next_nonce = CASE WHEN q.released_at IS NOT NULL THEN EXCLUDED.db_next_nonce ELSE q.db_next_nonce END,
        chain_nonce   = CASE WHEN q.released_at IS NOT NULL THEN EXCLUDED.chain_nonce ELSE q.chain_nonce END,
        detected_at   = CASE WHEN q.released_at IS NOT NULL THEN now() ELSE q.detected_at END,
        detected_by   = CASE WHEN q.released_at IS NOT NULL THEN EXCLUDED.detected_by ELSE q.detected_by END,
        fencing_token = CASE WHEN q.released_at IS NOT NULL THEN EXCLUDED.fencing_token ELSE q.fencing_token END,
        released_at = NULL, released_by = NULL, release_note = NULL
    -- Unreleased: kept as it is. Released: replaced only above what the operator released.
    WHERE q.released_at IS NULL OR EXCLUDED.chain_nonce > q.chain_nonce
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, EXISTS (SELECT 1 FROM recorded) AS quarantined;

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
