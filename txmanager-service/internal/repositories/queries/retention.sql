-- name: PruneFinal :one
-- One retention batch: the oldest run of feed positions whose completions are older than
-- the horizon by the database's clock (completed_at is the database's now(), so a node's
-- clock ahead of it must not delete early), with their transactions, attempts and audit rows. Only a leading run is taken,
-- so everything at or below pruned_through is gone and everything above it is still there:
-- a cursor below it is refused as expired, never served with holes. Final rows are no
-- longer written by any lease holder, so no lease is involved; the feed_sequencer row lock
-- orders this with everything that assigns positions (finality and the sequencer's rounds).
WITH state AS (
    SELECT pruned_through FROM feed_sequencer WHERE id FOR UPDATE
),
candidates AS (
    SELECT c.feed_position, c.tx_id, c.completed_at
    FROM tx_completions c
    WHERE c.feed_position > (SELECT pruned_through FROM state)
    ORDER BY c.feed_position
    LIMIT @batch_size
),
prefix AS (
    SELECT feed_position, tx_id FROM candidates
    WHERE feed_position < COALESCE((SELECT min(k.feed_position) FROM candidates k WHERE k.completed_at >= now() - make_interval(secs => sqlc.arg(horizon_seconds)::float8)), 9223372036854775807)
),
audit_gone AS (
    DELETE FROM stuck_resolution_audit s USING prefix p WHERE s.tx_id = p.tx_id RETURNING 1
),
attempts_gone AS (
    DELETE FROM tx_attempt a USING prefix p WHERE a.tx_id = p.tx_id RETURNING 1
),
completions_gone AS (
    DELETE FROM tx_completions c USING prefix p WHERE c.feed_position = p.feed_position RETURNING c.feed_position
),
txs_gone AS (
    DELETE FROM managed_tx m USING prefix p WHERE m.tx_id = p.tx_id AND m.state IN ('CONFIRMED', 'FAILED_FINAL')
    RETURNING m.chain_id, m.signer, m.nonce, m.tx_hash, m.block_number
),
-- Each signer's newest deleted transaction that was mined stays as the place a recovery may
-- start reading the chain from when nothing of the signer is left on record.
anchored AS (
    INSERT INTO signer_pruned_anchor (chain_id, signer, nonce, tx_hash, block_number)
    SELECT DISTINCT ON (g.chain_id, g.signer) g.chain_id, g.signer, g.nonce, g.tx_hash, g.block_number
    FROM txs_gone g
    WHERE g.block_number IS NOT NULL AND g.tx_hash IS NOT NULL
    ORDER BY g.chain_id, g.signer, g.nonce DESC
    ON CONFLICT (chain_id, signer) DO UPDATE SET nonce = excluded.nonce, tx_hash = excluded.tx_hash, block_number = excluded.block_number
    WHERE signer_pruned_anchor.nonce < excluded.nonce
),
-- An approval goes with its completion: the intent's own (it ended without a nonce), or the
-- transaction's it became (its own id, or the recovered transaction it adopted).
approvals_gone AS (
    DELETE FROM tx_approval a USING prefix p WHERE (a.approval_id = p.tx_id OR a.admitted_tx_id = p.tx_id)
      AND a.state IN ('ADMITTED', 'EXPIRED', 'REJECTED', 'REFUSED') RETURNING a.approval_id
),
votes_gone AS (
    DELETE FROM tx_approval_vote v
    USING (SELECT tx_id AS approval_id FROM prefix UNION SELECT approval_id FROM approvals_gone) g
    WHERE v.approval_id = g.approval_id RETURNING 1
),
marked AS (
    UPDATE feed_sequencer SET pruned_through = (SELECT max(feed_position) FROM completions_gone)
    WHERE id AND EXISTS (SELECT 1 FROM completions_gone)
    RETURNING pruned_through
)
SELECT (SELECT count(*) FROM txs_gone)::bigint AS transactions,
       (SELECT count(*) FROM attempts_gone)::bigint AS attempts,
       (SELECT count(*) FROM completions_gone)::bigint AS completions,
       COALESCE((SELECT pruned_through FROM marked), (SELECT pruned_through FROM state))::bigint AS pruned_through;
