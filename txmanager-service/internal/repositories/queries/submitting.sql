-- name: ListAllocated :many
-- The signer's ALLOCATED rows from @from_nonce up. No index names `state` (migration 0014:
-- signing is a HOT update), so the open rows' index is read from @from_nonce and each row's
-- state checked: from the lowest nonce the submitter has not signed, that is the ALLOCATED
-- rows alone; from 0, every open row of the signer.
-- Only what a first attempt is signed from: the intent's fields are read out of the payload
-- here, where jsonb holds them parsed, rather than the whole row with its payload printed as
-- JSON for the service to parse again. A field the payload lacks reads as an empty string
-- (mapping.go: intentPayload writes none of them empty); has_to tells a recipient left out
-- (a contract creation) from one written empty, which the service refuses.
SELECT tx_id, nonce,
       (payload ? 'to')::boolean                             AS has_to,
       COALESCE(payload->>'to', '')::text                    AS intent_to,
       COALESCE(payload->>'value', '')::text                 AS intent_value,
       COALESCE(payload->>'data', '')::text                  AS intent_data,
       COALESCE(payload->>'gasLimit', '')::text              AS intent_gas_limit,
       COALESCE(payload->>'effectiveGasLimit', '')::text     AS effective_gas_limit,
       COALESCE(payload->>'maxFeePerGas', '')::text          AS intent_max_fee,
       COALESCE(payload->>'maxPriorityFeePerGas', '')::text  AS intent_max_tip
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL AND nonce >= @from_nonce AND state = 'ALLOCATED'
ORDER BY nonce
LIMIT @max_rows;

-- name: MarkSigned :one
-- Persists signed attempts (hash, fees, raw bytes) and moves their transactions to
-- TRACKING before anything is broadcast, so a response lost after broadcast is never a
-- grey zone: the hash the node may know is already ours on record.
-- Only the rows still ALLOCATED move and get their attempt; it answers their ids, and the
-- submitter broadcasts those alone.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])::uuid AS tx_id,
           unnest(@tx_hashes::text[])    AS tx_hash,
           unnest(@nonces::bigint[])     AS nonce,
           unnest(@max_fees::text[])     AS max_fee,
           unnest(@max_tips::text[])     AS max_tip,
           unnest(@base_fees::text[])    AS base_fee,
           unnest(@gas_limits::bigint[]) AS gas_limit,
           unnest(@raw_txs::bytea[])     AS raw_tx,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS allocated
),
updated AS (
    UPDATE managed_tx m
    -- The cap signed, kept with the attempt it belongs to (migration 0017).
    SET state = 'TRACKING', sub_state = 'SIGNED', tx_hash = i.tx_hash, max_fee_signed = i.max_fee::numeric, max_fee_for_hash = tx_hash_key(i.tx_hash),
        submit_attempts = m.submit_attempts + 1,
        last_submit_at = now(), next_resubmit_at = now() + make_interval(secs => @resubmit_after_seconds::float8),
        last_error = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer
      AND (m.state = 'ALLOCATED') = i.allocated
    RETURNING m.tx_id
),
attempts AS (
    -- An attempt only for a row signed here: its transaction exists and is locked until
    -- the commit (migration 0016: no foreign key checks it).
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, base_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, i.tx_hash, i.tx_id, @signer, i.nonce, 'ORIGINAL', i.max_fee::numeric, i.max_tip::numeric, NULLIF(i.base_fee, '')::numeric, i.gas_limit, i.raw_tx, @fencing_token
    FROM updated u JOIN input i ON i.tx_id = u.tx_id
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, COALESCE((SELECT array_agg(tx_id) FROM updated), '{}')::uuid[] AS signed_ids;

-- name: ListResubmitDue :many
-- Broadcast, not mined, due again: with the current attempt (signed bytes, kind, fees) to
-- send again or re-price, and the sub-state its last answer recorded (which decides which).
-- STUCK ones too: a stuck transaction keeps being rebroadcast and re-priced until it is
-- final or an operator resolves it.
SELECT m.tx_id, m.tx_hash, COALESCE(m.sub_state, '')::text AS sub_state, a.raw_tx, a.kind, a.max_fee_per_gas::text AS max_fee, a.max_priority_fee_per_gas::text AS max_tip,
       COALESCE(m.payload->>'maxFeePerGas', '')::text AS intent_max_fee, COALESCE(m.payload->>'maxPriorityFeePerGas', '')::text AS intent_max_tip,
       COALESCE(m.payload->>'gasLimit', '')::text AS intent_gas_limit, COALESCE(m.payload->>'effectiveGasLimit', '')::text AS effective_gas_limit,
       (SELECT array_agg(x.tx_hash) FROM tx_attempt x WHERE x.tx_id = m.tx_id)::text[] AS attempt_hashes
FROM managed_tx m
JOIN tx_attempt a ON a.tx_hash = m.tx_hash
WHERE m.chain_id = @chain_id AND m.signer = @signer AND m.confirmed_at IS NULL AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL AND m.next_resubmit_at <= now()
ORDER BY m.nonce
LIMIT @max_rows;

-- name: NextResubmitIn :one
-- Seconds until the first of the signer's broadcast, unmined transactions is due again (0 or
-- less: one is due now), and whether it has any. Every write that schedules a resubmission
-- sets now() + the interval, except a reorg's (now()), so after this read none of the
-- signer's rows comes due before the answer unless a reorg reverts one (the submitter is
-- told) or the lease or the database server changes (it reads again).
SELECT count(next_resubmit_at) > 0 AS any_unmined, COALESCE(EXTRACT(EPOCH FROM min(next_resubmit_at) - now()), 0)::float8 AS seconds
FROM managed_tx
WHERE chain_id = @chain_id AND signer = @signer AND confirmed_at IS NULL AND state IN ('TRACKING', 'STUCK') AND receipt IS NULL;

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
    SELECT unnest(@tx_ids::text[])::uuid AS tx_id,
           unnest(@replaced::text[])     AS replaced,
           unnest(@tx_hashes::text[])    AS tx_hash,
           unnest(@nonces::bigint[])     AS nonce,
           unnest(@kinds::text[])        AS kind,
           unnest(@max_fees::text[])     AS max_fee,
           unnest(@max_tips::text[])     AS max_tip,
           unnest(@base_fees::text[])    AS base_fee,
           unnest(@gas_limits::bigint[]) AS gas_limit,
           unnest(@raw_txs::bytea[])     AS raw_tx,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS unmined
),
updated AS (
    UPDATE managed_tx m
    -- The highest cap signed stays on the row, kept with the new attempt (migration 0017);
    -- where the cap kept is not the current attempt's, the highest is not known here.
    SET tx_hash = i.tx_hash,
        max_fee_signed = CASE WHEN m.max_fee_for_hash = tx_hash_key(m.tx_hash) THEN GREATEST(m.max_fee_signed, i.max_fee::numeric) END,
        max_fee_for_hash = CASE WHEN m.max_fee_for_hash = tx_hash_key(m.tx_hash) THEN tx_hash_key(i.tx_hash) END,
        -- A limit raised above the one admitted (the L1 part Arbitrum counts as gas) is kept
        -- beside it, for the funds check to count (UnminedCost).
        payload = CASE WHEN i.gas_limit > GREATEST((m.payload->>'effectiveGasLimit')::bigint, (m.payload->>'gasLimit')::bigint, COALESCE((m.payload->>'signedGasLimit')::bigint, 0))
                       THEN jsonb_set(m.payload, '{signedGasLimit}', to_jsonb(i.gas_limit)) ELSE m.payload END,
        sub_state = 'REPRICED', fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer AND m.tx_hash = i.replaced
      AND (m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL) = i.unmined
    RETURNING m.tx_id
),
attempts AS (
    -- An attempt only for a row re-priced here (migration 0016).
    INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, base_fee_per_gas, gas_limit, raw_tx, fencing_token)
    SELECT @chain_id, i.tx_hash, i.tx_id, @signer, i.nonce, i.kind, i.max_fee::numeric, i.max_tip::numeric, NULLIF(i.base_fee, '')::numeric, i.gas_limit, i.raw_tx, @fencing_token
    FROM updated u JOIN input i ON i.tx_id = u.tx_id
    ON CONFLICT (tx_hash) DO NOTHING
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, COALESCE((SELECT array_agg(tx_id) FROM updated), '{}')::uuid[] AS updated_ids;

-- name: AllocationCursor :one
-- The signer's nonce cursor. Every transaction allocated after this read is at or above it:
-- an allocation writes from the cursor it reads (or higher) and moves it up, never down.
SELECT COALESCE((SELECT next_nonce FROM signer_nonce_cursor WHERE chain_id = @chain_id AND signer = @signer), 0)::bigint AS next_nonce;
