-- name: HeartbeatNode :exec
INSERT INTO node_registry (node_id, grpc_addr, http_addr, version, started_at, heartbeat_at, stopped_at)
VALUES (@node_id, @grpc_addr, @http_addr, @version, @started_at, now(), NULL)
ON CONFLICT (node_id) DO UPDATE SET
    grpc_addr = EXCLUDED.grpc_addr, http_addr = EXCLUDED.http_addr, version = EXCLUDED.version,
    started_at = EXCLUDED.started_at, heartbeat_at = now(), stopped_at = NULL;

-- name: MarkNodeStopped :exec
UPDATE node_registry SET stopped_at = now() WHERE node_id = @node_id;

-- name: GetNode :one
-- A node is alive when it has beaten recently (judged by the database clock) and has not
-- said it stopped.
SELECT node_id, grpc_addr, http_addr, version, started_at, heartbeat_at,
       (stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => @timeout_seconds::float8))::bool AS alive
FROM node_registry WHERE node_id = @node_id;

-- name: ListNodes :many
SELECT node_id, grpc_addr, http_addr, version, started_at, heartbeat_at,
       (stopped_at IS NULL AND heartbeat_at > now() - make_interval(secs => @timeout_seconds::float8))::bool AS alive,
       (SELECT count(*) FROM signer_lease l WHERE l.owner_node = n.node_id AND l.expires_at > now())::bigint AS leases
FROM node_registry n
ORDER BY node_id;
