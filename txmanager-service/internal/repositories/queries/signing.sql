-- name: RecordSigningHealth :one
-- The lease holder records whether the signer's key source signs (fenced: a node that lost
-- the signer must not overwrite what its new owner found). A failure keeps the time signing
-- first failed and takes the newest error; a success clears the failure.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
recorded AS (
    INSERT INTO signer_signing AS s (chain_id, signer, failing_since, last_error, last_error_at, last_signed_at, node_id, fencing_token, updated_at)
    SELECT @chain_id, @signer,
           CASE WHEN @failed::bool THEN @failing_since::timestamptz END,
           CASE WHEN @failed::bool THEN @last_error::text ELSE '' END,
           CASE WHEN @failed::bool THEN now() END,
           CASE WHEN @failed::bool THEN NULL ELSE now() END,
           @node_id, @fencing_token, now()
    FROM lease
    ON CONFLICT (chain_id, signer) DO UPDATE SET
        failing_since  = CASE WHEN @failed::bool THEN COALESCE(s.failing_since, EXCLUDED.failing_since) END,
        last_error     = CASE WHEN @failed::bool THEN EXCLUDED.last_error ELSE s.last_error END,
        last_error_at  = COALESCE(EXCLUDED.last_error_at, s.last_error_at),
        last_signed_at = COALESCE(EXCLUDED.last_signed_at, s.last_signed_at),
        node_id = EXCLUDED.node_id, fencing_token = EXCLUDED.fencing_token, updated_at = now()
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM recorded)::bigint AS recorded,
       -- As the row was before this write (the statement's snapshot): a success that ends a
       -- failure another process recorded is told as such.
       COALESCE((SELECT p.failing_since IS NOT NULL FROM signer_signing p WHERE p.chain_id = @chain_id AND p.signer = @signer), false)::bool AS was_failing;

-- name: UnsignedBacklog :one
-- How many of the signer's transactions wait for their first signature.
SELECT count(*)::bigint AS unsigned
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL AND state = 'ALLOCATED';

-- name: SignerConditions :many
-- Every serving signer's condition on the chain, read by every node alike, so that one
-- scrape of any node (or one readiness probe) sees them all: quarantined (and how many
-- unknown nonces its recovery has not recorded, and whether an operator released it), its
-- key source failing (since when, why), and the transactions waiting for a signature (how
-- many, the oldest's age). The signers are the roster's that are not retired, and any other
-- with a live quarantine or a signing record.
WITH signers AS (
    SELECT r.signer FROM signer_roster r WHERE r.state <> 'retired'
    UNION
    SELECT q.signer FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.released_at IS NULL
    UNION
    SELECT s.signer FROM signer_signing s WHERE s.chain_id = @chain_id AND s.failing_since IS NOT NULL
)
SELECT g.signer,
       (q.signer IS NOT NULL)::bool AS quarantined,
       COALESCE(q.chain_nonce - COALESCE(q.recorded_to, q.db_next_nonce), 0)::bigint AS unrecorded_nonces,
       (q.release_requested_at IS NOT NULL)::bool AS release_requested,
       s.failing_since AS signing_failing_since,
       COALESCE(s.last_error, '')::text AS signing_error,
       u.unsigned,
       u.oldest_unsigned_age_seconds
FROM signers g
LEFT JOIN signer_quarantine q ON q.chain_id = @chain_id AND q.signer = g.signer AND q.released_at IS NULL
LEFT JOIN signer_signing s ON s.chain_id = @chain_id AND s.signer = g.signer
CROSS JOIN LATERAL (
    SELECT count(*)::bigint AS unsigned,
           COALESCE(EXTRACT(EPOCH FROM now() - min(m.created_at)), 0)::float8 AS oldest_unsigned_age_seconds
    FROM managed_tx m
    WHERE m.chain_id = @chain_id AND m.signer = g.signer AND m.confirmed_at IS NULL AND m.state = 'ALLOCATED'
) u
ORDER BY g.signer;
