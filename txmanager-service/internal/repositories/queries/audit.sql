-- name: LockAuditHead :one
-- Appends take the head's lock: records are numbered and chained one at a time.
SELECT last_seq, last_hash FROM audit_head WHERE id FOR UPDATE;

-- name: ReadAuditHead :one
SELECT last_seq, last_hash, pruned_through_seq, pruned_through_hash FROM audit_head WHERE id;

-- name: InsertAuditRecord :exec
INSERT INTO audit_record (seq, at, node_id, actor, action, subject, before, after, prev_hash, hash)
VALUES (@seq, @at, @node_id, @actor, @action, @subject, @before, @after, @prev_hash, @hash);

-- name: AdvanceAuditHead :exec
UPDATE audit_head SET last_seq = @last_seq, last_hash = @last_hash WHERE id;

-- name: ListAuditRecords :many
-- Filtered reads, in sequence order after a cursor.
SELECT seq, at, node_id, actor, action, subject, before, after, prev_hash, hash
FROM audit_record
WHERE seq > @after_seq
  AND (@subject::text = '' OR subject = @subject)
  AND (@action::text = '' OR action = @action)
  AND (@actor::text = '' OR actor = @actor)
  AND at >= @since
ORDER BY seq
LIMIT @max_rows;

-- name: AuditRecordsToPrune :one
-- The last record kept before the first one at or after the cutoff (0 when there is none):
-- the trail is pruned through it. Records are numbered in order but stamped by each node's
-- clock, so one from a node whose clock runs behind may look older than records before it:
-- pruning through the last record older than the cutoff would take younger ones with it.
SELECT COALESCE(max(l.seq), 0)::bigint AS seq FROM audit_record l
WHERE l.seq < COALESCE((SELECT min(r.seq) FROM audit_record r WHERE r.at >= sqlc.arg(before)::timestamptz), 9223372036854775807);

-- name: AuditRecordHash :one
SELECT hash FROM audit_record WHERE seq = @seq;

-- name: PruneAuditRecords :execrows
DELETE FROM audit_record WHERE seq <= @through_seq;

-- name: MarkAuditPruned :exec
UPDATE audit_head SET pruned_through_seq = @through_seq, pruned_through_hash = @through_hash WHERE id;
