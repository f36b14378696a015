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

-- name: WriteClearAllocations :one
-- A writer batch's allocation for several signers in one statement, in the common case only:
-- each signer's part was numbered from its cached cursor (expected_nexts), and it goes in
-- only when the full path (LockLeaseAndReadCursor, then WriteAllocation) would write exactly
-- the same for that signer: its lease ours (held FOR KEY SHARE), its cursor where the cache
-- says, its roster row active and not paused (held FOR KEY SHARE, as the full path does, so
-- a retirement or a pause waits for the batch), no open quarantine, no recovered transaction
-- a create could adopt, no spending policy of its own or of its creates' credentials, and
-- none of its request ids already on record. A signer whose gate is not clear gets
-- nothing written and takes the full path in the same transaction; the others are written.
--
-- One statement for the batch instead of one per signer: a statement's fixed work (locks,
-- the cursor, the gate's look-ups, planning, the round trip) was most of a small part's cost
-- (5 signers of 6 rows: 2.2 ms a transaction, one signer of 30 rows: 1.1 ms).
--
-- Fencing: the leases CTE is the lease check of one signer taken for each signer of the
-- batch, matched on (signer, fencing_token) pairs as given; every row written joins the gate
-- (clear) on its own signer, and clear joins leases on that signer and token, so a row goes
-- in only under its own signer's lease and the token its part was numbered under.
WITH leases AS MATERIALIZED (
    SELECT sl.signer, sl.fencing_token FROM signer_lease sl
    JOIN (SELECT unnest(@signers::text[]) AS signer, unnest(@fencing_tokens::bigint[]) AS fencing_token) AS held
      ON sl.signer = held.signer AND sl.fencing_token = held.fencing_token
    WHERE sl.chain_id = @chain_id AND sl.owner_node = @node_id AND sl.expires_at > now()
    FOR KEY SHARE OF sl
),
input AS MATERIALIZED (
    SELECT unnest(@row_signers::text[])       AS signer,
           unnest(@tx_ids::text[])            AS tx_id,
           unnest(@tx_request_ids::text[])    AS request_id,
           unnest(@intent_hashes::bytea[])    AS intent_hash,
           unnest(@nonces::bigint[])          AS nonce,
           unnest(@payloads::text[])::jsonb   AS payload
),
-- The signers with one of their parts' request ids on record, as a transaction or an
-- approval request: one look-up of the unique
-- (chain_id, signer, request_id) index per row (a part has no request id twice: a repeat in
-- the batch is answered as a replay and has no row). A CTE of its own rather than a check
-- inside each signer's gate: there the generic plan's estimates grew with signers times rows,
-- so PostgreSQL planned the statement afresh at every call (TestClearAllocationsKeepAGenericPlan).
known AS MATERIALIZED (
    SELECT DISTINCT i.signer FROM input i
    CROSS JOIN LATERAL (
        SELECT 1 FROM managed_tx t WHERE t.chain_id = @chain_id AND t.signer = i.signer AND t.request_id = i.request_id
        -- An intent waiting for approval (or decided) holds its request id too.
        UNION ALL
        SELECT 1 FROM tx_approval a WHERE a.chain_id = @chain_id AND a.signer = i.signer AND a.request_id = i.request_id
        LIMIT 1
    ) on_record
    WHERE i.request_id <> ''
),
-- The signers a spending policy binds, its own or that of a credential one of its creates
-- came with: their policies are checked on the full path, inside this same transaction.
policed AS MATERIALIZED (
    SELECT p.scope AS signer FROM spending_policy p WHERE p.scope_kind = 'signer' AND p.scope = ANY(@signers::text[])
    UNION
    SELECT c.signer FROM (SELECT unnest(@credential_signers::text[]) AS signer, unnest(@credentials::text[]) AS credential) AS c
    WHERE EXISTS (SELECT 1 FROM spending_policy p WHERE p.scope_kind = 'credential' AND p.scope = c.credential)
),
clear AS MATERIALIZED (
    SELECT s.signer, s.fencing_token, s.expected_next, s.next_nonce, s.created_at
    FROM (SELECT unnest(@signers::text[])            AS signer,
                 unnest(@fencing_tokens::bigint[])   AS fencing_token,
                 unnest(@expected_nexts::bigint[])   AS expected_next,
                 unnest(@next_nonces::bigint[])      AS next_nonce,
                 unnest(@created_ats::timestamptz[]) AS created_at) AS s
    JOIN leases l ON l.signer = s.signer AND l.fencing_token = s.fencing_token
    JOIN signer_nonce_cursor c ON c.chain_id = @chain_id AND c.signer = s.signer AND c.next_nonce = s.expected_next
    WHERE NOT EXISTS (SELECT 1 FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.signer = s.signer AND q.released_at IS NULL)
      AND NOT EXISTS (SELECT 1 FROM managed_tx m WHERE m.chain_id = @chain_id AND m.signer = s.signer AND m.unclaimed_until > now())
      AND NOT EXISTS (SELECT 1 FROM known k WHERE k.signer = s.signer)
      AND COALESCE((SELECT CASE WHEN r.paused_at IS NULL THEN r.state ELSE 'paused' END FROM signer_roster r WHERE r.signer = s.signer FOR KEY SHARE), 'active') = 'active'
      AND NOT EXISTS (SELECT 1 FROM policed p WHERE p.signer = s.signer)
),
inserted AS (
    INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token, created_at, updated_at)
    SELECT @chain_id, t.tx_id::uuid, t.signer, NULLIF(t.request_id, ''), t.intent_hash, t.nonce, t.payload, 'ALLOCATED', g.fencing_token, g.created_at, g.created_at
    FROM input t JOIN clear g ON g.signer = t.signer
    RETURNING 1
),
advanced AS (
    UPDATE signer_nonce_cursor c SET next_nonce = g.next_nonce, fencing_token = g.fencing_token, updated_at = now()
    FROM clear g
    WHERE c.chain_id = @chain_id AND c.signer = g.signer AND c.next_nonce = g.expected_next
    RETURNING 1
)
SELECT COALESCE((SELECT array_agg(signer) FROM clear), '{}')::text[] AS clear_signers,
       (SELECT count(*) FROM inserted)::bigint AS inserted,
       (SELECT count(*) FROM advanced)::bigint AS cursor_advanced;

-- name: FindTxsByRequestIDs :many
-- One look-up of the unique (chain_id, signer, request_id) index per distinct request id.
-- The plainer "request_id = ANY(...)" lets a plan made before the table has statistics (a
-- new database's first minute, and every benchmark run) walk all of the signer's rows and
-- filter them: 7,000 buffers a call at 20,000 rows instead of a few per id.
SELECT m.* FROM (SELECT DISTINCT unnest(@request_ids::text[]) AS id) r
CROSS JOIN LATERAL (
    SELECT * FROM managed_tx t
    WHERE t.chain_id = @chain_id AND t.signer = @signer AND t.request_id = r.id
    LIMIT 1
) m;

-- name: GetTxByID :one
-- A transaction with, while it waits for its first signature, its signer's signing failure
-- if the key source fails (the reason it does not move).
SELECT sqlc.embed(m), s.failing_since AS signing_failing_since
FROM managed_tx m
LEFT JOIN signer_signing s ON s.chain_id = m.chain_id AND s.signer = m.signer AND m.state = 'ALLOCATED'
WHERE m.tx_id = @tx_id;

-- name: GetTxByRequestID :one
-- As GetTxByID, by the signer's request id.
SELECT sqlc.embed(m), s.failing_since AS signing_failing_since
FROM managed_tx m
LEFT JOIN signer_signing s ON s.chain_id = m.chain_id AND s.signer = m.signer AND m.state = 'ALLOCATED'
WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.request_id = @request_id;

-- name: FindUnclaimed :many
-- Inside a writer batch (the lease row already locked): the recovered rows still adoptable
-- whose recovery key one of the batch's creates carries, lowest nonce first, locked until
-- the batch commits.
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND unclaimed_until > now() AND recovery_key = ANY(@recovery_keys::bytea[])
ORDER BY nonce
FOR UPDATE;

-- name: ClaimUnclaimed :one
-- A retried create adopts a recovered row: the row takes the request's id and intent
-- fingerprint (a later replay of the request matches it) and stops being adoptable; if it
-- is final already, its held-back completion is written now. Fenced like WriteAllocation.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])         AS tx_id,
           unnest(@request_ids::text[])    AS request_id,
           unnest(@intent_hashes::bytea[]) AS intent_hash
),
claimed AS (
    UPDATE managed_tx m
    SET request_id = NULLIF(i.request_id, ''), intent_hash = i.intent_hash, unclaimed_until = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.unclaimed_until > now()
    RETURNING m.chain_id, m.tx_id, m.signer, m.state
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM claimed WHERE state IN ('CONFIRMED', 'FAILED_FINAL')
    ON CONFLICT (tx_id) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM claimed)::bigint AS claimed;

-- name: AwaitStandby :exec
-- Commits a transaction of its own that writes WAL (a transactional logical message, which
-- any role may emit and every WAL level records), so its commit waits for the synchronous
-- standby like every write's: once it returns, every commit before it is on the standby.
-- A transaction that only took an id would not wait. A commit whose own wait was cut
-- short (its client's deadline, a cancel) is visible on the primary without being on the
-- standby; a reader that answers from such a row waits here first.
-- Where the server names no synchronous standby, or the session's commits do not wait for
-- one, it writes nothing: no commit waits there, so neither would this one, and the reads
-- that call it cost no WAL write and flush.
SELECT CASE WHEN current_setting('synchronous_standby_names') <> ''
             AND current_setting('synchronous_commit') NOT IN ('off', 'local')
            THEN pg_logical_emit_message(true, 'txmanager-standby', '') END;

-- name: HasUnclaimed :one
-- Whether a recovered transaction with the recovery key is still adoptable: a create the
-- chain's checks or the funds check refuse may be the retry of a lost request whose intent
-- already ran, and is sent to the writer to adopt it.
SELECT EXISTS (
    SELECT 1 FROM managed_tx
    WHERE chain_id = @chain_id AND signer = @signer AND unclaimed_until > now() AND recovery_key = @recovery_key::bytea
)::bool AS adoptable;
