-- name: ListCompletionsAfter :many
-- Positions are assigned under the feed_sequencer row lock, by finality's statement or a
-- sequencer round, one transaction at a time, each above every earlier one and all of it
-- visible at once: a consumer paging by position never misses a completion and never sees
-- one twice.
-- An intent that waited for approval and ended without a nonce has its approval, not a
-- transaction, behind its completion.
SELECT c.feed_position::bigint AS feed_position, c.chain_id, c.tx_id, c.signer, c.status, c.completed_at, COALESCE(t.nonce, 0)::bigint AS nonce, t.tx_hash, t.block_number,
       COALESCE(t.placeholder, false)::bool AS placeholder,
       COALESCE(t.request_id, a.request_id, '')::text AS request_id, (t.recovered_at IS NOT NULL)::bool AS recovered,
       COALESCE((t.receipt->>'gasUsed')::bigint, 0)::bigint AS gas_used, COALESCE(t.receipt->>'effectiveGasPrice', '')::text AS effective_gas_price,
       COALESCE(t.receipt->>'l1Fee', '')::text AS l1_fee,
       (CASE WHEN t.tx_id IS NULL THEN COALESCE(a.final_reason, '') ELSE '' END)::text AS reason
FROM tx_completions c
LEFT JOIN managed_tx t ON t.tx_id = c.tx_id
LEFT JOIN tx_approval a ON t.tx_id IS NULL AND a.approval_id = c.tx_id
WHERE c.feed_position > @after_position::bigint
  AND (sqlc.arg(all_signers)::bool OR c.signer = ANY(sqlc.arg(signers)::text[]))
  AND (sqlc.arg(all_chains)::bool OR c.chain_id = sqlc.arg(chain_id)::bigint)
ORDER BY c.feed_position
LIMIT @page_size;

-- name: FeedPending :one
-- The look that starts every sequencer round, without a lock: the last position assigned
-- anywhere and whether a committed completion still waits for one (finality positions its
-- own; reconciliation and adoption leave theirs to the sequencer).
-- (min(seq) rather than EXISTS: PostgreSQL answers it from the small index of unpositioned
-- rows whatever the statistics, where a plan made while the table was empty scans the
-- whole table: 230 buffers a look at 20,000 completions instead of 3.)
SELECT last_position, pruned_through,
       ((SELECT min(seq) FROM tx_completions WHERE feed_position IS NULL) IS NOT NULL)::bool AS unpositioned
FROM feed_sequencer WHERE id;

-- name: LockFeedSequencer :one
-- The first statement of a sequencer round: one round at a time on the whole cluster, so
-- rounds commit in the order of the positions they assign.
SELECT last_position, pruned_through FROM feed_sequencer WHERE id FOR UPDATE;

-- name: AssignFeedPositions :one
-- The second statement, on a fresh snapshot taken after the lock: every completion
-- committed by now and not positioned gets the next positions, in insertion order.
WITH pending AS (
    SELECT seq FROM tx_completions WHERE feed_position IS NULL ORDER BY seq LIMIT @max_rows
),
numbered AS (
    SELECT seq, (sqlc.arg(last_position)::bigint + row_number() OVER (ORDER BY seq))::bigint AS pos FROM pending
),
positioned AS (
    UPDATE tx_completions c SET feed_position = n.pos, positioned_at = now()
    FROM numbered n
    WHERE c.seq = n.seq AND c.feed_position IS NULL
    RETURNING c.feed_position, c.completed_at
),
advanced AS (
    UPDATE feed_sequencer SET last_position = (SELECT max(feed_position) FROM positioned)
    WHERE id AND EXISTS (SELECT 1 FROM positioned)
    RETURNING last_position
)
SELECT (SELECT count(*) FROM positioned)::bigint AS positioned,
       COALESCE((SELECT EXTRACT(EPOCH FROM now() - min(completed_at)) FROM positioned), 0)::float8 AS oldest_wait_seconds;

-- name: FeedState :one
SELECT last_position, pruned_through FROM feed_sequencer WHERE id;

-- name: PositionOfLegacyCursor :one
-- Cursors from before positions were "<xid>-<seq>"; the migration positioned those rows
-- in that order, so such a cursor stands for the last position at or before it.
-- A consumer translates its old cursor once, so this reads the table rather than keep an
-- index on (xid, seq) that every completion would write (migration 0015).
SELECT COALESCE(max(feed_position), 0)::bigint AS feed_position
FROM tx_completions
WHERE (xid, seq) <= (CAST(sqlc.arg(xid)::text AS xid8), sqlc.arg(seq)::bigint) AND feed_position IS NOT NULL;
