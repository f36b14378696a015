-- name: RecordBroadcasts :one
-- Outcomes of broadcasts: sub_state and last error (cleared on success) per transaction,
-- where the bytes sent (tx_hash) are still its current attempt: the resubmission and a
-- stuck resolution run side by side, and an old attempt's answer ("underpriced" beside the
-- cancellation that replaced it) written on the newer one would have it outbid again for
-- nothing, or hide its own refusal.
-- Bookkeeping the pipeline finds again from the chain (the next resubmission learns the
-- outcome anew), so its commit does not wait for the WAL flush (see RecordReceipts).
WITH relaxed_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
),
lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])::uuid AS tx_id,
           unnest(@tx_hashes::text[])      AS tx_hash,
           unnest(@sub_states::text[])     AS sub_state,
           unnest(@last_errors::text[])    AS last_error,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS unmined
),
updated AS (
    UPDATE managed_tx m
    SET sub_state = i.sub_state, last_error = NULLIF(i.last_error, ''), fencing_token = @fencing_token, updated_at = now(),
        -- A node that wants a higher price is outbid at once, not a resubmit interval later.
        next_resubmit_at = CASE WHEN i.sub_state = 'UNDERPRICED' AND m.sub_state IS DISTINCT FROM 'UNDERPRICED' THEN now() ELSE m.next_resubmit_at END
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer
      AND (m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL) = i.unmined
      AND m.tx_hash = i.tx_hash
      -- A rebroadcast that the node answers as before changes nothing: no new row version.
      AND (m.sub_state IS DISTINCT FROM i.sub_state OR m.last_error IS DISTINCT FROM NULLIF(i.last_error, '') OR m.fencing_token <> @fencing_token)
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated FROM relaxed_commit;

-- name: RecordAttempt :one
-- A replacement, cancellation or placeholder attempt for the same nonce becomes the
-- transaction's current attempt; the earlier ones stay on record for receipt look-ups. With
-- check_current, only where the attempt it was priced against (current_hash; '' for none
-- signed) is still the current one: a re-pricing stored meanwhile wins, and this attempt,
-- priced below it, is neither stored nor sent.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
updated AS (
    UPDATE managed_tx m
    -- The highest cap signed stays on the row (migration 0017), as in RecordReplacements.
    SET tx_hash = @tx_hash::text,
        max_fee_signed = CASE WHEN m.max_fee_for_hash = tx_hash_key(m.tx_hash) THEN GREATEST(m.max_fee_signed, CAST(sqlc.arg(max_fee)::text AS numeric)) END,
        max_fee_for_hash = CASE WHEN m.max_fee_for_hash = tx_hash_key(m.tx_hash) THEN tx_hash_key(@tx_hash::text) END,
        state = 'TRACKING', sub_state = @sub_state, submit_attempts = m.submit_attempts + 1,
        last_submit_at = now(), next_resubmit_at = now() + make_interval(secs => @resubmit_after_seconds::float8),
        fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
      AND (NOT @check_current::bool OR m.tx_hash IS NOT DISTINCT FROM NULLIF(@current_hash::text, ''))
    RETURNING m.tx_id
),
attempt AS (
    -- The attempt only if the row took it (migration 0016).
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, base_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, @tx_hash, @tx_id, @signer, @nonce, @kind, CAST(sqlc.arg(max_fee)::text AS numeric), CAST(sqlc.arg(max_tip)::text AS numeric),
           CAST(NULLIF(sqlc.arg(base_fee)::text, '') AS numeric), @gas_limit, @raw_tx, @fencing_token
    FROM updated
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated;
