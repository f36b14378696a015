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
        -- A new quarantine starts its recovery afresh; a live one keeps its progress.
        recorded_to     = CASE WHEN q.released_at IS NOT NULL THEN NULL ELSE q.recorded_to END,
        scan_from_block = CASE WHEN q.released_at IS NOT NULL THEN NULL ELSE q.scan_from_block END,
        recorded_count  = CASE WHEN q.released_at IS NOT NULL THEN 0 ELSE q.recorded_count END,
        release_requested_at = CASE WHEN q.released_at IS NOT NULL THEN NULL ELSE q.release_requested_at END,
        release_requested_by = CASE WHEN q.released_at IS NOT NULL THEN NULL ELSE q.release_requested_by END,
        release_request_note = CASE WHEN q.released_at IS NOT NULL THEN NULL ELSE q.release_request_note END,
        released_at = NULL, released_by = NULL, release_note = NULL
    -- Unreleased: kept as it is. Released: replaced only above what the operator released.
    WHERE q.released_at IS NULL OR EXCLUDED.chain_nonce > q.chain_nonce
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, EXISTS (SELECT 1 FROM recorded) AS quarantined;

-- name: GetQuarantine :one
SELECT q.signer, q.db_next_nonce, q.chain_nonce, q.detected_at, q.detected_by, q.fencing_token,
       q.released_at, COALESCE(q.released_by, '')::text AS released_by, COALESCE(q.release_note, '')::text AS release_note,
       COALESCE(q.recorded_to, q.db_next_nonce)::bigint AS recorded_to, q.recorded_count,
       q.release_requested_at, COALESCE(q.release_requested_by, '')::text AS release_requested_by
FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.signer = @signer;

-- name: RequestRelease :execrows
-- An operator looked at the unknown nonces and lets the signer serve again. The release is
-- a request the signer's recovery carries out (FinishRecovery) once every transaction the
-- chain shows at those nonces is recorded: a release never skips the recording that lets a
-- lost request's retry be answered with its transaction instead of a second one. A second
-- request keeps the first one's time.
UPDATE signer_quarantine SET release_requested_at = COALESCE(release_requested_at, now()),
    release_requested_by = @released_by, release_request_note = @note
WHERE chain_id = @chain_id AND signer = @signer AND released_at IS NULL;

-- name: QuarantineNonceRanges :many
-- The quarantine's unknown nonces summarised as runs of consecutive nonces in one class:
-- ADOPTED (a retried create was answered with the recorded transaction), UNCLAIMED (recorded,
-- adoptable until its window ends), EXPIRED (recorded, the window ended unadopted),
-- NOT_RECORDED (no transaction recorded there: recovery has not reached it, or the chain
-- does not show one). It reads the rows recorded, not every nonce of the range: the gaps
-- between them are the NOT_RECORDED runs, so a range of millions of nonces with few rows
-- recorded is summarised at once.
WITH q AS (
    SELECT sq.db_next_nonce, sq.chain_nonce FROM signer_quarantine sq WHERE sq.chain_id = @chain_id AND sq.signer = @signer
),
recorded AS (
    SELECT m.nonce,
           CASE WHEN m.request_id IS NOT NULL THEN 'ADOPTED'
                WHEN m.unclaimed_until IS NOT NULL THEN 'UNCLAIMED'
                ELSE 'EXPIRED' END AS class
    FROM q
    JOIN managed_tx m ON m.chain_id = @chain_id AND m.signer = @signer AND m.nonce >= q.db_next_nonce AND m.nonce < q.chain_nonce
),
runs AS (
    SELECT nonce, class, nonce - row_number() OVER (PARTITION BY class ORDER BY nonce) AS run
    FROM recorded
),
ordered AS (
    SELECT nonce, lag(nonce) OVER (ORDER BY nonce) AS previous FROM recorded
),
gaps AS (
    -- Between two rows recorded.
    SELECT previous + 1 AS first_nonce, nonce - 1 AS last_nonce FROM ordered WHERE previous IS NOT NULL AND nonce > previous + 1
    UNION ALL
    -- Before the first row (the whole range when none is recorded).
    SELECT q.db_next_nonce, COALESCE((SELECT min(nonce) FROM recorded), q.chain_nonce) - 1 FROM q
    UNION ALL
    -- After the last row.
    SELECT (SELECT max(nonce) FROM recorded) + 1, q.chain_nonce - 1 FROM q WHERE EXISTS (SELECT 1 FROM recorded)
)
SELECT class::text AS class, min(nonce)::bigint AS first_nonce, max(nonce)::bigint AS last_nonce, count(*)::bigint AS nonces
FROM runs
GROUP BY class, run
UNION ALL
SELECT 'NOT_RECORDED'::text, first_nonce::bigint, last_nonce::bigint, (last_nonce - first_nonce + 1)::bigint
FROM gaps
WHERE last_nonce >= first_nonce
ORDER BY first_nonce;

-- name: ListRecovered :many
-- The rows recovery recorded at a quarantine's unknown nonces (the admin listing shows
-- whether a retried create adopted each, and what the chain ran there).
SELECT nonce, tx_id, COALESCE(request_id, '')::text AS request_id, unclaimed_until, COALESCE(tx_hash, '')::text AS tx_hash,
       payload, COALESCE(block_number, 0)::bigint AS block_number
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND nonce = ANY(@nonces::bigint[]) AND recovered_at IS NOT NULL;
