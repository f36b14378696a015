-- name: ListCompletionsAfter :many
-- Sequence order is not commit order: a row with a smaller seq can commit after a larger
-- one was already served. Ordering by the writing transaction's id and serving only rows
-- whose transaction is older than every transaction still running (the snapshot's xmin)
-- means a row not served yet can only ever appear after the cursor.
SELECT c.seq, c.xid::text AS xid, c.tx_id, c.signer, c.status, c.completed_at, t.nonce, t.tx_hash, t.block_number
FROM tx_completions c
JOIN managed_tx t ON t.tx_id = c.tx_id
WHERE (c.xid, c.seq) > (CAST(sqlc.arg(after_xid)::text AS xid8), sqlc.arg(after_seq)::bigint)
  AND c.xid < pg_snapshot_xmin(pg_current_snapshot())
  AND (sqlc.arg(all_signers)::bool OR c.signer = ANY(sqlc.arg(signers)::text[]))
ORDER BY c.xid, c.seq
LIMIT @page_size;
