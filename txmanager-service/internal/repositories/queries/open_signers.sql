-- name: ListOpenSigners :many
-- Signers with unfinished transactions or a live quarantine (whose recovery must run
-- somewhere), and who (if anyone) holds their lease now.
SELECT o.signer, l.owner_node, l.fencing_token, COALESCE(l.expires_at > now(), false)::bool AS lease_live
FROM (SELECT m.signer FROM managed_tx m WHERE m.chain_id = @chain_id AND m.confirmed_at IS NULL
      UNION
      SELECT q.signer FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.released_at IS NULL) o
LEFT JOIN signer_lease l ON l.chain_id = @chain_id AND l.signer = o.signer;

-- name: OldestPendingAges :many
-- Per signer, how long its oldest unfinished transaction has been waiting.
SELECT signer, EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS age_seconds
FROM managed_tx
WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND confirmed_at IS NULL
GROUP BY signer;
