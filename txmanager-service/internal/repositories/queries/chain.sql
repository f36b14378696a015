-- name: RecordChainIdentity :exec
-- The first start records the chain; a concurrent first start of another node records the
-- same row or finds it there.
INSERT INTO chain_identity (chain_id, genesis_hash)
VALUES (CAST(sqlc.arg(chain_id)::text AS numeric), @genesis_hash)
ON CONFLICT (chain_id) DO NOTHING;

-- name: ListChainIdentities :many
SELECT chain_id::text AS chain_id, genesis_hash, recorded_at FROM chain_identity ORDER BY recorded_at;
