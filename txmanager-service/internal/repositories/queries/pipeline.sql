-- name: ListAllocated :many
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND state = 'ALLOCATED'
ORDER BY nonce
LIMIT @max_rows;

-- name: MarkSigned :one
-- Persists signed attempts (hash, fees, raw bytes) and moves their transactions to
-- TRACKING before anything is broadcast, so a response lost after broadcast is never a
-- grey zone: the hash the node may know is already ours on record.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])             AS tx_id,
           unnest(@tx_hashes::text[])          AS tx_hash,
           unnest(@nonces::bigint[])           AS nonce,
           unnest(@max_fees::text[])           AS max_fee,
           unnest(@max_tips::text[])           AS max_tip,
           unnest(@gas_limits::bigint[])       AS gas_limit,
           unnest(@raw_txs::bytea[])           AS raw_tx
),
attempts AS (
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, i.tx_hash, i.tx_id::uuid, @signer, i.nonce, 'ORIGINAL', i.max_fee::numeric, i.max_tip::numeric, i.gas_limit, i.raw_tx, @fencing_token
    FROM lease, input i
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
),
updated AS (
    UPDATE managed_tx m
    SET state = 'TRACKING', sub_state = 'SIGNED', tx_hash = i.tx_hash, submit_attempts = m.submit_attempts + 1,
        last_submit_at = now(), next_resubmit_at = now() + make_interval(secs => @resubmit_after_seconds::float8),
        last_error = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.state = 'ALLOCATED'
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated;

-- name: RecordBroadcasts :one
-- Outcomes of broadcasts: sub_state and last error (cleared on success) per transaction.
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
    SELECT unnest(@tx_ids::text[])      AS tx_id,
           unnest(@sub_states::text[])  AS sub_state,
           unnest(@last_errors::text[]) AS last_error
),
updated AS (
    UPDATE managed_tx m
    SET sub_state = i.sub_state, last_error = NULLIF(i.last_error, ''), fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated FROM relaxed_commit;

-- name: ListAwaitingReceipt :many
-- Transactions broadcast and not mined, with every attempt's hash: a receipt for any of
-- them (the original or a replacement) settles the transaction.
SELECT m.tx_id, m.signer, m.nonce,
       array_agg(a.tx_hash ORDER BY a.created_at)::text[] AS attempt_hashes,
       array_agg(a.kind ORDER BY a.created_at)::text[]    AS attempt_kinds
FROM managed_tx m
JOIN tx_attempt a ON a.tx_id = m.tx_id
WHERE m.chain_id = @chain_id AND m.signer = ANY(@signers::text[]) AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
GROUP BY m.tx_id, m.signer, m.nonce;

-- name: RecordReceipts :one
-- Mined: store the receipt of whichever attempt was mined. A STUCK transaction that gets a
-- receipt goes back to TRACKING and on to its final state like any other.
--
-- The commit does not wait for the WAL flush (synchronous_commit off for this transaction
-- alone): a receipt lost with the last moments before a database crash is looked up again,
-- and nothing durable can depend on it, since every later durable commit (finality reads
-- the receipt) flushes the WAL past it. Under load the flushes are what every writer waits
-- for, creates included.
WITH relaxed_commit AS MATERIALIZED (
    SELECT set_config('synchronous_commit', 'off', true)
),
lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])        AS tx_id,
           unnest(@tx_hashes::text[])     AS tx_hash,
           unnest(@receipts::text[])::jsonb AS receipt,
           unnest(@block_numbers::bigint[]) AS block_number,
           unnest(@block_hashes::text[])  AS block_hash
),
updated AS (
    UPDATE managed_tx m
    SET receipt = i.receipt, block_number = i.block_number, block_hash = i.block_hash, tx_hash = i.tx_hash,
        state = 'TRACKING', sub_state = 'MINED', last_error = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated FROM relaxed_commit;

-- name: ListMined :many
-- Every finality pass reads these: the receipt's two fields it needs come out as columns,
-- so the receipt document is not shipped and decoded each time.
SELECT tx_id, signer, nonce, block_number, block_hash,
       (receipt->>'status')::bigint AS receipt_status, COALESCE(receipt->>'kind', '')::text AS receipt_kind
FROM managed_tx
WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND state IN ('TRACKING', 'STUCK') AND receipt IS NOT NULL;

-- name: RevertReorged :one
-- The block holding the receipt left the canonical chain: forget the receipt and look the
-- transaction up again; resubmission is due at once in case the reorg dropped it.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[]) AS tx_id, unnest(@block_hashes::text[]) AS block_hash
),
updated AS (
    UPDATE managed_tx m
    SET receipt = NULL, block_number = NULL, block_hash = NULL, state = 'TRACKING', sub_state = 'REORGED',
        next_resubmit_at = now(), fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.block_hash = i.block_hash AND m.state IN ('TRACKING', 'STUCK')
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated;

-- name: FinalizeTxs :one
-- Final state and its completions-feed row in one fenced statement: a completion exists if
-- and only if the transaction is final.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])       AS tx_id,
           unnest(@block_hashes::text[]) AS block_hash,
           unnest(@states::text[])       AS state,
           unnest(@sub_states::text[])   AS sub_state
),
finalized AS (
    UPDATE managed_tx m
    SET state = i.state, sub_state = NULLIF(i.sub_state, ''), confirmed_at = now(), next_resubmit_at = NULL,
        fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.block_hash = i.block_hash AND m.state IN ('TRACKING', 'STUCK')
    RETURNING m.chain_id, m.tx_id, m.signer, m.state
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM finalized
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM completed)::bigint AS updated;

-- name: ListResubmitDue :many
-- Broadcast, not mined, due again: with the current attempt (signed bytes, kind, fees) to
-- send again or re-price. STUCK ones too: a stuck transaction keeps being rebroadcast and
-- re-priced until it is final or an operator resolves it.
SELECT m.tx_id, m.tx_hash, a.raw_tx, a.kind, a.max_fee_per_gas::text AS max_fee, a.max_priority_fee_per_gas::text AS max_tip,
       COALESCE(m.payload->>'maxFeePerGas', '')::text AS intent_max_fee, COALESCE(m.payload->>'maxPriorityFeePerGas', '')::text AS intent_max_tip,
       (SELECT array_agg(x.tx_hash) FROM tx_attempt x WHERE x.tx_id = m.tx_id)::text[] AS attempt_hashes
FROM managed_tx m
JOIN tx_attempt a ON a.tx_hash = m.tx_hash
WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL AND m.next_resubmit_at <= now()
ORDER BY m.nonce
LIMIT @max_rows;

-- name: ClaimResubmits :one
-- Claim before the RPC: advance next_resubmit_at and count the attempt, so two nodes (or
-- two loops) never rebroadcast the same transaction for the same slot. Returns the ids
-- actually claimed (still due and unmined). The ids travel as text: pgx cannot encode a
-- uuid array in the exec and simple-protocol modes a transaction pooler needs.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
claimed AS (
    UPDATE managed_tx m
    SET next_resubmit_at = now() + make_interval(secs => @resubmit_after_seconds::float8), submit_attempts = m.submit_attempts + 1,
        last_submit_at = now(), fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = ANY(CAST(@tx_ids::text[] AS uuid[])) AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
      AND m.next_resubmit_at <= now()
    RETURNING m.tx_id
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, COALESCE((SELECT array_agg(tx_id) FROM claimed), '{}')::uuid[] AS claimed_ids;

-- name: GetResolvable :one
-- An unmined transaction with what resolving it needs: its current attempt's fees ('' before
-- the first signing), the signer's pending depth, and since when it has been waiting
-- (creation, or the last resolution claimed for it). Without a tx_id it is the signer's
-- head of line: the lowest unmined nonce, which everything after it waits for.
SELECT m.tx_id, m.signer, m.nonce, m.state, m.sub_state, m.tx_hash, m.submit_attempts, m.last_error, m.created_at, m.payload,
       COALESCE(a.max_fee_per_gas::text, '')::text AS max_fee_per_gas, COALESCE(a.max_priority_fee_per_gas::text, '')::text AS max_priority_fee_per_gas,
       COALESCE(a.gas_limit, 0)::bigint AS attempt_gas_limit,
       (SELECT count(*) FROM managed_tx p WHERE p.chain_id = m.chain_id AND p.signer = m.signer AND p.state IN ('ALLOCATED', 'TRACKING', 'STUCK'))::bigint AS pending_depth,
       COALESCE((SELECT max(s.created_at) FROM stuck_resolution_audit s WHERE s.tx_id = m.tx_id), m.created_at)::timestamptz AS stuck_since
FROM managed_tx m
LEFT JOIN tx_attempt a ON a.tx_hash = m.tx_hash
WHERE m.tx_id = COALESCE(sqlc.narg('tx_id')::uuid, (
        SELECT h.tx_id FROM managed_tx h
        WHERE h.chain_id = @chain_id AND h.signer = sqlc.narg('signer')::text AND h.state IN ('TRACKING', 'STUCK') AND h.receipt IS NULL
        ORDER BY h.nonce
        LIMIT 1))
  AND m.chain_id = @chain_id AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL;

-- name: ClaimStuckResolution :one
-- Claim a stuck transaction for one resolution action and audit it, in one fenced
-- statement, before any chain side effect. NOOP marks it STUCK; the other actions leave it
-- TRACKING with a sub-state naming the action until their attempt is recorded.
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
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
      AND (m.sub_state IS DISTINCT FROM @sub_state OR m.state IS DISTINCT FROM @new_state)
    RETURNING m.tx_id, m.nonce
),
audited AS (
    INSERT INTO stuck_resolution_audit (chain_id, signer, tx_id, nonce, action, node_id, fencing_token, reason)
    SELECT @chain_id, @signer, tx_id, nonce, @action, @node_id, @fencing_token, @reason FROM claimed
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM audited)::bigint AS updated;

-- name: RecordAttempt :one
-- A replacement, cancellation or placeholder attempt for the same nonce becomes the
-- transaction's current attempt; the earlier ones stay on record for receipt look-ups.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
attempt AS (
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, @tx_hash, @tx_id, @signer, @nonce, @kind, CAST(sqlc.arg(max_fee)::text AS numeric), CAST(sqlc.arg(max_tip)::text AS numeric), @gas_limit, @raw_tx, @fencing_token
    FROM lease
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
),
updated AS (
    UPDATE managed_tx m
    SET tx_hash = @tx_hash, state = 'TRACKING', sub_state = @sub_state, submit_attempts = m.submit_attempts + 1,
        last_submit_at = now(), next_resubmit_at = now() + make_interval(secs => @resubmit_after_seconds::float8),
        fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated;

-- name: RecordReplacements :one
-- Re-priced attempts of claimed rebroadcasts, stored before they are sent: each becomes its
-- transaction's current attempt, the earlier ones stay on record (a receipt for any of them
-- settles the transaction). Only where the attempt replaced is still the current one.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])       AS tx_id,
           unnest(@replaced::text[])     AS replaced,
           unnest(@tx_hashes::text[])    AS tx_hash,
           unnest(@nonces::bigint[])     AS nonce,
           unnest(@kinds::text[])        AS kind,
           unnest(@max_fees::text[])     AS max_fee,
           unnest(@max_tips::text[])     AS max_tip,
           unnest(@gas_limits::bigint[]) AS gas_limit,
           unnest(@raw_txs::bytea[])     AS raw_tx
),
attempts AS (
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, i.tx_hash, i.tx_id::uuid, @signer, i.nonce, i.kind, i.max_fee::numeric, i.max_tip::numeric, i.gas_limit, i.raw_tx, @fencing_token
    FROM lease, input i
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
),
updated AS (
    UPDATE managed_tx m
    SET tx_hash = i.tx_hash, sub_state = 'REPRICED', fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    WHERE m.tx_id = i.tx_id::uuid AND m.chain_id = @chain_id AND m.signer = @signer AND m.tx_hash = i.replaced AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
    RETURNING m.tx_id
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, COALESCE((SELECT array_agg(tx_id) FROM updated), '{}')::uuid[] AS updated_ids;

-- name: ListOpenSigners :many
-- Signers with unfinished transactions, and who (if anyone) holds their lease now.
SELECT o.signer, l.owner_node, l.fencing_token, COALESCE(l.expires_at > now(), false)::bool AS lease_live
FROM (SELECT DISTINCT m.signer FROM managed_tx m WHERE m.chain_id = @chain_id AND m.state IN ('ALLOCATED', 'TRACKING', 'STUCK')) o
LEFT JOIN signer_lease l ON l.chain_id = @chain_id AND l.signer = o.signer;

-- name: OldestPendingAges :many
-- Per signer, how long its oldest unfinished transaction has been waiting.
SELECT signer, EXTRACT(EPOCH FROM now() - min(created_at))::float8 AS age_seconds
FROM managed_tx
WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND state IN ('ALLOCATED', 'TRACKING', 'STUCK')
GROUP BY signer;

-- name: LowestOpenNonce :one
-- The signer's lowest nonce not yet final: everything above waits for it, and a nonce hole
-- lies below it.
SELECT COALESCE(min(nonce), -1)::bigint AS nonce
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND state IN ('ALLOCATED', 'TRACKING', 'STUCK');

-- name: InsertPlaceholders :one
-- Fill nonce holes: zero-value self-transfers at nonces below the signer's open ones that
-- no transaction of ours or anyone's holds. They go through the pipeline like any
-- allocation. A row that appeared at one of those nonces meanwhile wins (unique signer,
-- nonce); the cursor is above them already.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
inserted AS (
    INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, placeholder, fencing_token, created_at, updated_at)
    SELECT @chain_id, t.tx_id::uuid, @signer, t.intent_hash, t.nonce, t.payload::jsonb, 'ALLOCATED', 'PLACEHOLDER', true, @fencing_token, now(), now()
    FROM lease, (
        SELECT unnest(@tx_ids::text[])         AS tx_id,
               unnest(@nonces::bigint[])       AS nonce,
               unnest(@intent_hashes::bytea[]) AS intent_hash,
               unnest(@payloads::text[])       AS payload
    ) AS t
    ON CONFLICT DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM inserted)::bigint AS inserted;

-- name: ListNonceTaken :many
-- Broadcasts answered "nonce too low" while none of their attempts is known to the node:
-- the nonce went to a transaction the database has no attempt for, to be identified.
SELECT * FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND state IN ('TRACKING', 'STUCK') AND receipt IS NULL AND sub_state = 'NONCE_TAKEN'
ORDER BY nonce
LIMIT @max_rows;

-- name: FailNonceTaken :one
-- Another transaction, not this one's intent, was mined at its nonce and is confirmed: the
-- intent can never execute. Final as FAILED_FINAL/NONCE_TAKEN with its completion.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
failed AS (
    UPDATE managed_tx m
    SET state = 'FAILED_FINAL', sub_state = 'NONCE_TAKEN', last_error = @reason, confirmed_at = now(), next_resubmit_at = NULL,
        fencing_token = @fencing_token, updated_at = now()
    FROM lease
    WHERE m.tx_id = @tx_id AND m.chain_id = @chain_id AND m.signer = @signer AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL AND m.sub_state = 'NONCE_TAKEN'
    RETURNING m.chain_id, m.tx_id, m.signer, m.state
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status)
    SELECT chain_id, tx_id, signer, state FROM failed
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM completed)::bigint AS updated;
