-- name: ListOpenSigners :many
-- Signers with unfinished transactions or a live quarantine (whose recovery must run
-- somewhere), and who (if anyone) holds their lease now.
-- The signers with open rows are found by skipping through the open rows' index, one probe
-- per signer (each finds the first open row of the next signer), rather than by reading
-- every open row and keeping the distinct signers: a backlog of 15,000 open rows among 20
-- signers took about 60 ms a call that way, and a node runs this every second.
WITH RECURSIVE open_signer AS (
    (SELECT m.signer FROM managed_tx m
     WHERE m.chain_id = @chain_id AND m.confirmed_at IS NULL
     ORDER BY m.signer LIMIT 1)
    UNION ALL
    SELECT (SELECT m.signer FROM managed_tx m
            WHERE m.chain_id = @chain_id AND m.confirmed_at IS NULL AND m.signer > s.signer
            ORDER BY m.signer LIMIT 1)
    FROM open_signer s
    WHERE s.signer IS NOT NULL
)
SELECT o.signer, l.owner_node, l.fencing_token, COALESCE(l.expires_at > now(), false)::bool AS lease_live
FROM (SELECT s.signer FROM open_signer s WHERE s.signer IS NOT NULL
      UNION
      SELECT q.signer FROM signer_quarantine q WHERE q.chain_id = @chain_id AND q.released_at IS NULL) o
LEFT JOIN signer_lease l ON l.chain_id = @chain_id AND l.signer = o.signer;

-- name: OldestPendingAges :many
-- Per signer, how long its oldest unfinished transaction has been waiting.
SELECT signer, EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS age_seconds
FROM managed_tx
WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND confirmed_at IS NULL
GROUP BY signer;
