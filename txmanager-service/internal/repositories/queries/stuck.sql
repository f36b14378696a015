-- name: GetResolvable :one
-- An unmined transaction with what resolving it needs: its current attempt's fees ('' before
-- the first signing), every attempt's hash (an earlier one may be what the chain mined), the gas limit its intent was last signed with (a cancellation's or a
-- placeholder's would not run the intent again), the signer's pending depth, and since when
-- it has been waiting
-- (creation, or the last resolution claimed for it). Without a tx_id it is the signer's
-- head of line: the lowest unmined nonce, which everything after it waits for. Named by
-- its tx_id, a transaction still waiting for its first signature (ALLOCATED) is one too: a
-- key source that refuses to sign it holds back every nonce after it.
SELECT m.tx_id, m.signer, m.nonce, m.state, m.sub_state, m.tx_hash, m.submit_attempts, m.last_error, m.created_at, m.payload,
       COALESCE(a.max_fee_per_gas::text, '')::text AS max_fee_per_gas, COALESCE(a.max_priority_fee_per_gas::text, '')::text AS max_priority_fee_per_gas,
       COALESCE((SELECT i.gas_limit FROM tx_attempt i WHERE i.tx_id = m.tx_id AND i.kind IN ('ORIGINAL', 'REPLACE')
                 ORDER BY i.created_at DESC, i.gas_limit DESC LIMIT 1), 0)::bigint AS intent_gas_limit,
       (SELECT count(*) FROM managed_tx p WHERE p.chain_id = m.chain_id AND p.signer = m.signer AND p.confirmed_at IS NULL)::bigint AS pending_depth,
       COALESCE((SELECT max(s.created_at) FROM stuck_resolution_audit s WHERE s.tx_id = m.tx_id), m.created_at)::timestamptz AS stuck_since,
       COALESCE((SELECT array_agg(i.tx_hash ORDER BY i.created_at) FROM tx_attempt i WHERE i.tx_id = m.tx_id), '{}')::text[] AS attempt_hashes
FROM managed_tx m
LEFT JOIN tx_attempt a ON a.tx_hash = m.tx_hash
WHERE m.tx_id = COALESCE(sqlc.narg('tx_id')::uuid, (
        SELECT h.tx_id FROM managed_tx h
        WHERE h.chain_id = @chain_id AND h.signer = sqlc.narg('signer')::text AND h.confirmed_at IS NULL AND h.state IN ('TRACKING', 'STUCK') AND h.receipt IS NULL
        ORDER BY h.nonce
        LIMIT 1))
  AND m.chain_id = @chain_id AND m.receipt IS NULL
  AND (m.state IN ('TRACKING', 'STUCK') OR (sqlc.narg('tx_id')::uuid IS NOT NULL AND m.state = 'ALLOCATED'));

-- name: ClaimStuckResolution :one
-- Claim a stuck transaction for one resolution action and audit it, in one fenced
-- statement, before any chain side effect. NOOP marks it STUCK; the other actions leave it
-- TRACKING with a sub-state naming the action until their attempt is recorded. One never
-- signed (ALLOCATED) is claimed only for an action that puts its own transaction at the
-- nonce (resolve checks), and the submitter signs it no more. With check_current, only while
-- the attempt the resolution was priced against (current_hash; '' for none signed) is still
-- the current one: a re-pricing stored since the head was read is not claimed over.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
claimed AS (
    UPDATE managed_tx m
    SET state = @new_state, sub_state = @sub_state, last_error = NULLIF(@reason::text, ''),
        fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('ALLOCATED', 'TRACKING', 'STUCK') AND m.receipt IS NULL
      AND (m.sub_state IS DISTINCT FROM @sub_state OR m.state IS DISTINCT FROM @new_state)
      AND (NOT @check_current::bool OR m.tx_hash IS NOT DISTINCT FROM NULLIF(@current_hash::text, ''))
    RETURNING m.tx_id, m.nonce
),
audited AS (
    INSERT INTO stuck_resolution_audit (chain_id, signer, tx_id, nonce, action, node_id, fencing_token, reason)
    SELECT @chain_id, @signer, tx_id, nonce, @action, @node_id, @fencing_token, @reason FROM claimed
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM audited)::bigint AS updated;
