-- name: AcquireOrRenewLease :one
-- One atomic statement judged by the database clock. The owner renews an unexpired lease and
-- keeps its token; anyone else takes over only once the lease has been expired for longer
-- than the clock-skew allowance, and every acquisition after expiry or change of owner
-- increments the token. When the lease is not ours the current holder is returned with
-- acquired = false, so the caller can name the owner.
--
-- Another node's live lease is seen by a plain read and answered without touching the row:
-- an upsert would lock it even when its WHERE turns out false, and so queue every
-- non-owner's request behind the owner's writers, which hold the row FOR KEY SHARE. The
-- upsert sets owner_node and fencing_token, key columns (migration 0009), so a takeover waits
-- for every open fenced write of the old owner.
WITH holder AS (
    SELECT h.owner_node, h.expires_at FROM signer_lease h WHERE h.chain_id = @chain_id AND h.signer = @signer
),
upsert AS (
    INSERT INTO signer_lease AS l (chain_id, signer, owner_node, fencing_token, acquired_at, expires_at, updated_at)
    SELECT @chain_id, @signer, @node_id, 1, now(), now() + make_interval(secs => @duration_seconds::float8), now()
    WHERE NOT EXISTS (
        SELECT 1 FROM holder
        WHERE holder.owner_node <> @node_id AND holder.expires_at > now() - make_interval(secs => @skew_seconds::float8))
    ON CONFLICT (chain_id, signer) DO UPDATE SET
        owner_node    = EXCLUDED.owner_node,
        fencing_token = CASE WHEN l.owner_node = EXCLUDED.owner_node AND l.expires_at > now()
                             THEN l.fencing_token ELSE l.fencing_token + 1 END,
        acquired_at   = CASE WHEN l.owner_node = EXCLUDED.owner_node AND l.expires_at > now()
                             THEN l.acquired_at ELSE now() END,
        expires_at    = EXCLUDED.expires_at,
        updated_at    = now()
    WHERE l.owner_node = EXCLUDED.owner_node
       OR l.expires_at <= now() - make_interval(secs => @skew_seconds::float8)
    RETURNING l.signer, l.owner_node, l.fencing_token, l.acquired_at, l.expires_at
)
SELECT u.signer, u.owner_node, u.fencing_token, u.acquired_at, u.expires_at, true AS acquired, now()::timestamptz AS db_now
FROM upsert u
UNION ALL
SELECT c.signer, c.owner_node, c.fencing_token, c.acquired_at, c.expires_at, false AS acquired, now()::timestamptz AS db_now
FROM signer_lease c
WHERE c.chain_id = @chain_id AND c.signer = @signer AND NOT EXISTS (SELECT 1 FROM upsert);

-- name: RenewLeases :many
-- One statement renews every lease a node holds and uses: each stays with its token, and a
-- lease missing from the answer has expired (or changed owner) and is gone for this node.
-- It sets no key column, so it does not wait for the node's own writers (FOR KEY SHARE).
UPDATE signer_lease
SET expires_at = now() + make_interval(secs => @duration_seconds::float8), updated_at = now()
WHERE owner_node = @node_id AND chain_id = @chain_id AND signer = ANY(@signers::text[]) AND expires_at > now()
RETURNING signer, fencing_token, expires_at, now()::timestamptz AS db_now;

-- name: ReleaseLease :execrows
-- Ends our lease at once (expiry in the past, beyond any skew allowance) so a peer can take
-- over without waiting; the token stays, the next acquirer increments it.
UPDATE signer_lease
SET expires_at = now() - interval '1 hour', updated_at = now()
WHERE chain_id = @chain_id AND signer = @signer AND owner_node = @node_id AND fencing_token = @fencing_token;

-- name: LockLeaseAndReadCursor :one
-- The first statement of every writer batch for a signer: proves the lease is still ours and
-- holds it FOR KEY SHARE until commit, so a takeover (which must change the row's key
-- columns owner_node and fencing_token, migration 0009) waits for
-- this transaction and can never slip between the check and the commit. The signer's roster
-- row is held FOR KEY SHARE the same way: a retirement (RetireRosterSigner, FOR UPDATE) waits
-- for the batch, and a batch after it reads the new state (no row: a signer the roster has
-- not met, which serves).
--
-- It also counts the batch's request ids already on record (one look-up of the unique
-- request-id index per distinct id, as FindTxsByRequestIDs), so the batch reads those
-- transactions only when there are some: a retry is rare, and the look-up was one statement
-- more per signer in every batch.
SELECT l.fencing_token, c.next_nonce,
       -- '' (none), 'held' (waits for recovery or an operator), 'releasing' (an operator
       -- released it; recovery finishes recording, then it serves).
       COALESCE((SELECT CASE WHEN q.release_requested_at IS NULL THEN 'held' ELSE 'releasing' END FROM signer_quarantine q
                 WHERE q.chain_id = l.chain_id AND q.signer = l.signer AND q.released_at IS NULL), '')::text AS quarantine,
       EXISTS (SELECT 1 FROM managed_tx m WHERE m.chain_id = l.chain_id AND m.signer = l.signer AND m.unclaimed_until > now())::bool AS has_unclaimed,
       -- The state and the pause come from the one locked read: a batch that waited for a
       -- pause's lock reads the row as the pause left it (a second, unlocked read would still
       -- see the statement's snapshot from before it). 'active paused' when paused.
       COALESCE((SELECT r.state || CASE WHEN r.paused_at IS NULL THEN '' ELSE ' paused' END
                 FROM signer_roster r WHERE r.signer = l.signer FOR KEY SHARE), 'active')::text AS roster_state,
       (SELECT count(*) FROM (SELECT DISTINCT unnest(@request_ids::text[]) AS id) r
        CROSS JOIN LATERAL (
            SELECT 1 FROM managed_tx t WHERE t.chain_id = l.chain_id AND t.signer = l.signer AND t.request_id = r.id
            -- An intent waiting for approval (or decided) holds its request id too.
            UNION ALL
            SELECT 1 FROM tx_approval a WHERE a.chain_id = l.chain_id AND a.signer = l.signer AND a.request_id = r.id
            LIMIT 1
        ) known)::bigint AS known_requests
FROM signer_lease l
LEFT JOIN signer_nonce_cursor c ON c.chain_id = l.chain_id AND c.signer = l.signer
WHERE l.chain_id = @chain_id AND l.signer = @signer
  AND l.owner_node = @node_id
  AND l.fencing_token = @fencing_token
  AND l.expires_at > now()
FOR KEY SHARE OF l;
