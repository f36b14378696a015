package repositories

import (
	"context"
	"fmt"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AuditRepository implements services.AuditStore on the audit_record and audit_head tables
// (migration 0020).
type AuditRepository struct {
	q *sqlcdb.Queries
}

// NewAuditRepository builds the repository on the pool.
func NewAuditRepository(pool *pgxpool.Pool) *AuditRepository {
	return &AuditRepository{q: sqlcdb.New(pool)}
}

// Append implements services.AuditStore: it numbers rec after the trail's head, chains its
// hash to the head's, and moves the head, inside sess (the action's own transaction).
func (r *AuditRepository) Append(ctx context.Context, sess txmanager.Session, rec domain.AuditRecord) (domain.AuditRecord, error) {
	q := sqlcdb.New(sess.DB())
	head, err := q.LockAuditHead(ctx)
	if err != nil {
		return rec, fmt.Errorf("audit head: %w", err)
	}
	rec.Seq, rec.PrevHash = head.LastSeq+1, head.LastHash
	rec.At = rec.At.UTC().Truncate(time.Microsecond)
	rec.Hash = rec.ChainHash(rec.PrevHash)
	if err := q.InsertAuditRecord(ctx, sqlcdb.InsertAuditRecordParams{Seq: rec.Seq, At: rec.At, NodeID: rec.Node, Actor: rec.Actor, Action: rec.Action,
		Subject: rec.Subject, Before: rec.Before, After: rec.After, PrevHash: rec.PrevHash, Hash: rec.Hash}); err != nil {
		return rec, fmt.Errorf("audit record: %w", err)
	}
	if err := q.AdvanceAuditHead(ctx, sqlcdb.AdvanceAuditHeadParams{LastSeq: rec.Seq, LastHash: rec.Hash}); err != nil {
		return rec, fmt.Errorf("audit head: %w", err)
	}
	return rec, nil
}

// List implements services.AuditStore.
func (r *AuditRepository) List(ctx context.Context, sess txmanager.Session, f services.AuditFilter) ([]domain.AuditRecord, error) {
	rows, err := inSession(r.q, sess).ListAuditRecords(ctx, sqlcdb.ListAuditRecordsParams{AfterSeq: f.AfterSeq, Subject: f.Subject, Action: f.Action, Actor: f.Actor,
		Since: f.Since, MaxRows: int32(f.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list audit records: %w", err)
	}
	out := make([]domain.AuditRecord, len(rows))
	for i, row := range rows {
		out[i] = domain.AuditRecord{Seq: row.Seq, At: row.At, Node: row.NodeID, Actor: row.Actor, Action: row.Action, Subject: row.Subject,
			Before: row.Before, After: row.After, PrevHash: row.PrevHash, Hash: row.Hash}
	}
	return out, nil
}

// Head implements services.AuditStore.
func (r *AuditRepository) Head(ctx context.Context, sess txmanager.Session) (services.AuditHead, error) {
	row, err := inSession(r.q, sess).ReadAuditHead(ctx)
	if err != nil {
		return services.AuditHead{}, fmt.Errorf("audit head: %w", err)
	}
	return services.AuditHead{LastSeq: row.LastSeq, LastHash: row.LastHash, PrunedThroughSeq: row.PrunedThroughSeq, PrunedThroughHash: row.PrunedThroughHash}, nil
}

// Prune implements services.AuditStore: records older than before go, and the head keeps
// the last one's sequence and hash, which the first record kept must follow. The pruning is
// itself recorded by the caller.
func (r *AuditRepository) Prune(ctx context.Context, sess txmanager.Session, before time.Time) (int64, error) {
	q := sqlcdb.New(sess.DB())
	if _, err := q.LockAuditHead(ctx); err != nil {
		return 0, fmt.Errorf("audit head: %w", err)
	}
	through, err := q.AuditRecordsToPrune(ctx, before)
	if err != nil || through == 0 {
		return 0, err
	}
	hash, err := q.AuditRecordHash(ctx, through)
	if err != nil {
		return 0, fmt.Errorf("audit record %d: %w", through, err)
	}
	n, err := q.PruneAuditRecords(ctx, through)
	if err != nil {
		return 0, fmt.Errorf("prune audit records: %w", err)
	}
	if err := q.MarkAuditPruned(ctx, sqlcdb.MarkAuditPrunedParams{ThroughSeq: through, ThroughHash: hash}); err != nil {
		return 0, fmt.Errorf("audit head: %w", err)
	}
	return n, nil
}
