-- name: HeartbeatNode :many
-- A node's row belongs to one process (incarnation) at a time: another incarnation takes it
-- over only once the holder said it stopped or fell silent for the node timeout (judged by
-- the database clock). No row back: a live process already uses this node id.
INSERT INTO node_registry (node_id, incarnation, grpc_addr, http_addr, version, started_at, heartbeat_at, stopped_at)
VALUES (@node_id, @incarnation, @grpc_addr, @http_addr, @version, @started_at, now(), NULL)
ON CONFLICT (node_id) DO UPDATE SET
    incarnation = EXCLUDED.incarnation, grpc_addr = EXCLUDED.grpc_addr, http_addr = EXCLUDED.http_addr,
    version = EXCLUDED.version, started_at = EXCLUDED.started_at, heartbeat_at = now(), stopped_at = NULL
WHERE node_registry.incarnation = EXCLUDED.incarnation
   OR node_registry.stopped_at IS NOT NULL
   OR node_registry.heartbeat_at <= now() - make_interval(secs => @timeout_seconds::float8)
RETURNING node_id;

-- name: MarkNodeStopped :exec
UPDATE node_registry SET stopped_at = now() WHERE node_id = @node_id AND incarnation = @incarnation;

-- name: GetNode :one
-- A node is alive when it has beaten recently (judged by the database clock) and has not
-- said it stopped.
SELECT node_id, incarnation, grpc_addr, http_addr, version, started_at, heartbeat_at,
       (stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => @timeout_seconds::float8))::bool AS alive
FROM node_registry WHERE node_id = @node_id;

-- name: ListNodes :many
SELECT node_id, incarnation, grpc_addr, http_addr, version, started_at, heartbeat_at,
       (stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => @timeout_seconds::float8))::bool AS alive,
       (SELECT count(*) FROM signer_lease l WHERE l.owner_node = n.node_id || '#' || n.incarnation AND l.expires_at > now())::bigint AS leases
FROM node_registry n
ORDER BY node_id;

-- name: SignerStatus :one
SELECT COALESCE(l.owner_node, '')::text                          AS owner_node,
       COALESCE(l.fencing_token, 0)::bigint                      AS fencing_token,
       COALESCE(l.expires_at, 'epoch'::timestamptz)::timestamptz AS lease_expires_at,
       COALESCE(l.expires_at > now(), false)::bool               AS lease_live,
       COALESCE(c.next_nonce, 0)::bigint                         AS next_nonce,
       (SELECT count(*) FROM managed_tx m WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL)::bigint AS pending_depth,
       COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(m.created_at)) FROM managed_tx m
                 WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL), 0)::float8 AS oldest_pending_age_seconds,
       (SELECT count(*) FROM managed_tx m WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL AND m.state = 'STUCK')::bigint AS stuck_count,
       (SELECT count(*) FROM managed_tx m WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL AND m.state = 'ALLOCATED')::bigint AS unsigned,
       COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(m.created_at)) FROM managed_tx m
                 WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL AND m.state = 'ALLOCATED'), 0)::float8 AS oldest_unsigned_age_seconds,
       s.failing_since AS signing_failing_since,
       COALESCE(s.last_error, '')::text AS signing_error,
       COALESCE(q.chain_nonce - COALESCE(q.recorded_to, q.db_next_nonce), 0)::bigint AS unrecorded_nonces,
       (q.release_requested_at IS NOT NULL)::bool AS release_requested,
       (q.signer IS NOT NULL)::bool AS quarantined
FROM (SELECT 1) AS one
LEFT JOIN signer_lease l ON l.chain_id = @chain_id AND l.signer = @signer
LEFT JOIN signer_nonce_cursor c ON c.chain_id = @chain_id AND c.signer = @signer
LEFT JOIN signer_signing s ON s.chain_id = @chain_id AND s.signer = @signer
LEFT JOIN signer_quarantine q ON q.chain_id = @chain_id AND q.signer = @signer AND q.released_at IS NULL;

-- name: ListStuck :many
SELECT * FROM managed_tx
WHERE chain_id = sqlc.arg(chain_id) AND confirmed_at IS NULL AND state = 'STUCK' AND (sqlc.arg(any_signer)::bool OR signer = sqlc.arg(signer)::text)
ORDER BY created_at
LIMIT sqlc.arg(page_size);
