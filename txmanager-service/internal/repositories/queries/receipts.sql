-- name: ListAwaitingReceipt :many
-- Transactions broadcast and not mined, with every attempt's hash: a receipt for any of
-- them (the original or a replacement) settles the transaction.
SELECT m.tx_id, m.signer, m.nonce,
       array_agg(a.tx_hash ORDER BY a.created_at)::text[] AS attempt_hashes,
       array_agg(a.kind ORDER BY a.created_at)::text[]    AS attempt_kinds
FROM managed_tx m
JOIN tx_attempt a ON a.tx_id = m.tx_id
WHERE m.chain_id = @chain_id AND m.signer = ANY(@signers::text[]) AND m.confirmed_at IS NULL AND m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL
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
    SELECT unnest(@tx_ids::text[])::uuid    AS tx_id,
           unnest(@tx_hashes::text[])       AS tx_hash,
           unnest(@receipts::text[])::jsonb AS receipt,
           unnest(@block_numbers::bigint[]) AS block_number,
           unnest(@block_hashes::text[])    AS block_hash,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS unmined
),
updated AS (
    UPDATE managed_tx m
    SET receipt = i.receipt, block_number = i.block_number, block_hash = i.block_hash, tx_hash = i.tx_hash,
        state = 'TRACKING', sub_state = 'MINED', last_error = NULL, fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer
      AND (m.state IN ('TRACKING', 'STUCK') AND m.receipt IS NULL) = i.unmined
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated FROM relaxed_commit;

-- name: ListMined :many
-- Every finality pass reads these: the receipt's fields it needs (status and kind decide the
-- final state, the cost feeds the spend counters) come out as columns,
-- so the receipt document is not shipped and decoded each time.
SELECT tx_id, signer, nonce, block_number, block_hash,
       (receipt->>'status')::bigint AS receipt_status, COALESCE(receipt->>'kind', '')::text AS receipt_kind,
       COALESCE((receipt->>'gasUsed')::bigint, 0)::bigint AS gas_used,
       COALESCE(receipt->>'effectiveGasPrice', '')::text AS effective_gas_price,
       COALESCE(receipt->>'l1Fee', '')::text AS l1_fee
FROM managed_tx
WHERE chain_id = @chain_id AND signer = ANY(@signers::text[]) AND confirmed_at IS NULL AND receipt IS NOT NULL AND state IN ('TRACKING', 'STUCK');

-- name: RevertReorged :one
-- The block holding the receipt left the canonical chain: forget the receipt and look the
-- transaction up again; resubmission is due at once in case the reorg dropped it. The
-- current attempt is again the newest one stored, not the one that was mined (an earlier
-- attempt mined before a cancellation or a re-price stored later): resubmission and stuck
-- resolution go on from it, and an operator's cancellation is not undone.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])::uuid AS tx_id, unnest(@block_hashes::text[]) AS block_hash,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS open
),
updated AS (
    UPDATE managed_tx m
    SET receipt = NULL, block_number = NULL, block_hash = NULL, state = 'TRACKING', sub_state = 'REORGED',
        tx_hash = COALESCE((SELECT a.tx_hash FROM tx_attempt a WHERE a.tx_id = m.tx_id ORDER BY a.created_at DESC, a.max_fee_per_gas DESC LIMIT 1), m.tx_hash),
        next_resubmit_at = now(), fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer AND m.block_hash = i.block_hash
      AND (m.state IN ('TRACKING', 'STUCK')) = i.open
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM updated)::bigint AS updated;

-- name: FinalizeTxs :one
-- Final state and its completions-feed row in one fenced statement: a completion exists if
-- and only if the transaction is final, except for a recovered row no request has adopted
-- yet, whose completion waits for its adopter (ClaimUnclaimed) or the end of the adoption
-- window (ExpireUnclaimed).
--
-- A receipt the pipeline held in memory until finality (receipts non-empty for that row) is
-- written here with the final state, one row version for both: the row must then have no
-- receipt on record. Otherwise the receipt on record must be in the block judged final.
--
-- The completions get their feed positions here, not in a later sequencer round: one row
-- version for each instead of an insert and an update. The feed_sequencer row lock taken
-- by this statement is held until it commits, so statements that position completions take
-- turns in commit order: one that reads last_position after another has committed, and
-- nothing positioned becomes visible before every lower position is. Here the lock comes
-- after the managed_tx rows; retention and sequencer rounds take it first, then touch only
-- final rows and committed completions, which no finality statement waits for. (The one
-- cycle conceivable, a row made final by another writer while this statement re-checked
-- it and deleted by retention at once, needs a retention horizon shorter than a
-- statement; PostgreSQL's deadlock detector would end it and the next pass repeat it.)
-- The lock is taken only when something becomes final and held for one commit, so
-- finality statements take turns cluster-wide: at c ms a commit (more with a synchronous
-- standby), at most 1000/c signers' finality statements a second, each covering every
-- transaction of its signer a pass found final.
WITH lease AS MATERIALIZED (
    SELECT 1 FROM signer_lease sl
    WHERE sl.chain_id = @chain_id AND sl.signer = @signer AND sl.owner_node = @node_id AND sl.fencing_token = @fencing_token AND sl.expires_at > now()
    FOR KEY SHARE
),
input AS (
    SELECT unnest(@tx_ids::text[])::uuid    AS tx_id,
           unnest(@block_hashes::text[])    AS block_hash,
           unnest(@states::text[])          AS state,
           unnest(@sub_states::text[])      AS sub_state,
           unnest(@receipts::text[])        AS receipt,
           unnest(@block_numbers::bigint[]) AS block_number,
           unnest(@tx_hashes::text[])       AS tx_hash,
           @chain_id::bigint AS chain_id, @signer::text AS signer, true AS open
),
finalized AS (
    UPDATE managed_tx m
    SET state = i.state, sub_state = NULLIF(i.sub_state, ''), confirmed_at = now(), next_resubmit_at = NULL,
        receipt = CASE WHEN i.receipt = '' THEN m.receipt ELSE i.receipt::jsonb END,
        block_number = CASE WHEN i.receipt = '' THEN m.block_number ELSE i.block_number END,
        block_hash = i.block_hash,
        tx_hash = CASE WHEN i.receipt = '' THEN m.tx_hash ELSE i.tx_hash END,
        last_error = CASE WHEN i.receipt = '' THEN m.last_error END,
        fencing_token = @fencing_token, updated_at = now()
    FROM lease, input i
    -- Rows by primary key through input alone; every other check names i (package doc: batch writes).
    WHERE m.tx_id = i.tx_id AND m.chain_id = i.chain_id AND m.signer = i.signer
      AND (m.state IN ('TRACKING', 'STUCK')) = i.open
      AND CASE WHEN i.receipt = '' THEN m.block_hash = i.block_hash ELSE m.receipt IS NULL END
    RETURNING m.chain_id, m.tx_id, m.signer, m.state, m.unclaimed_until, m.nonce
),
completing AS MATERIALIZED (
    SELECT chain_id, tx_id, signer, state, row_number() OVER (ORDER BY nonce) AS n
    FROM finalized WHERE unclaimed_until IS NULL
),
counted AS (
    SELECT count(*) AS k FROM completing
),
sequenced AS (
    UPDATE feed_sequencer s SET last_position = s.last_position + c.k
    FROM counted c
    WHERE s.id AND c.k > 0
    RETURNING s.last_position - c.k AS base
),
completed AS (
    INSERT INTO tx_completions (chain_id, tx_id, signer, status, feed_position, positioned_at)
    SELECT c.chain_id, c.tx_id, c.signer, c.state, q.base + c.n, CASE WHEN q.base IS NOT NULL THEN now() END
    -- Without the sequencer's row (never deleted) the completion is still written, without
    -- a position until the row is back: a transaction is never final without its completion.
    FROM completing c LEFT JOIN sequenced q ON true
    RETURNING 1
)
SELECT EXISTS (SELECT 1 FROM lease) AS lease_held, (SELECT count(*) FROM finalized)::bigint AS updated;
