package services

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// AuditStore keeps the audit trail (migration 0020).
type AuditStore interface {
	// Append numbers and chains rec after the trail's last record, inside sess.
	Append(ctx context.Context, sess txmanager.Session, rec domain.AuditRecord) (domain.AuditRecord, error)
	// List and Head read inside sess (nil: on their own).
	List(ctx context.Context, sess txmanager.Session, f AuditFilter) ([]domain.AuditRecord, error)
	Head(ctx context.Context, sess txmanager.Session) (AuditHead, error)
	// Prune removes the records older than before, keeping the last one's hash in the head.
	Prune(ctx context.Context, sess txmanager.Session, before time.Time) (int64, error)
}

// AuditFilter selects records, in sequence order after AfterSeq.
type AuditFilter struct {
	AfterSeq int64
	Subject  string
	Action   string
	Actor    string
	Since    time.Time
	Limit    int
}

// AuditHead is where the trail ends, and where its retention cut it.
type AuditHead struct {
	LastSeq           int64
	LastHash          []byte
	PrunedThroughSeq  int64
	PrunedThroughHash []byte
}

// AuditVerification is the outcome of checking the whole trail.
type AuditVerification struct {
	Checked  int64
	Head     AuditHead
	FirstBad *domain.AuditBreak
}

// AuditTrail records every admin action, policy change and approval, append-only, each record
// chained to the one before by hash (docs/audit.md), and checks the chain.
type AuditTrail struct {
	tx    txmanager.Manager
	store AuditStore
	node  string
	clock Clock
	log   *log.Helper
}

// NewAuditTrail wires the trail; node names this instance in its records.
func NewAuditTrail(tx txmanager.Manager, store AuditStore, node NodeName, clock Clock, logger log.Logger) *AuditTrail {
	return &AuditTrail{tx: tx, store: store, node: string(node), clock: clock, log: log.NewHelper(log.With(logger, "component", "audit"))}
}

// NodeName is this instance's node id, as records and leases name it.
type NodeName string

// Record appends a record inside sess, the action's own transaction: the action and its
// record commit together or not at all. before and after are marshalled to JSON (nil: none).
func (a *AuditTrail) Record(ctx context.Context, sess txmanager.Session, actor, action, subject string, before, after any) error {
	rec := domain.AuditRecord{At: a.clock.Now(), Node: a.node, Actor: actor, Action: action, Subject: subject, Before: auditJSON(before), After: auditJSON(after)}
	if _, err := a.store.Append(ctx, sess, rec); err != nil {
		return fmt.Errorf("audit %s %s: %w", action, subject, err)
	}
	return nil
}

// RecordAfter appends a record of an action already committed by a store that keeps its
// own transactions (adding, retiring, releasing a signer, resolving a transaction). Should
// the record fail, the action stands and the failure is logged as an error: the trail then
// misses it, which the log says.
func (a *AuditTrail) RecordAfter(ctx context.Context, actor, action, subject string, before, after any) {
	if a == nil {
		return // a test stack without a trail
	}
	ctx = context.WithoutCancel(ctx)
	err := a.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("audit.record"), func(ctx context.Context, sess txmanager.Session) error {
		return a.Record(ctx, sess, actor, action, subject, before, after)
	})
	if err != nil {
		a.log.Errorw("msg", "an admin action could not be recorded in the audit trail", "actor", actor, "action", action, "subject", subject, "error", err.Error())
	}
}

// List reads records with filters (at most 1,000 a call).
func (a *AuditTrail) List(ctx context.Context, f AuditFilter) ([]domain.AuditRecord, error) {
	if f.Limit <= 0 || f.Limit > 1000 {
		f.Limit = 1000
	}
	if f.AfterSeq < 0 {
		return nil, &domain.ValidationError{Field: "afterSeq", Reason: "must not be negative"}
	}
	return a.store.List(ctx, nil, f)
}

// verifyPage is how many records Verify reads at a time.
const verifyPage = 5000

// verifyTimeout bounds a verification's one snapshot (a trail of millions of records reads
// in seconds).
const verifyTimeout = 5 * time.Minute

// Verify recomputes the whole trail's chain from where its retention cut it to its head,
// and names the first record that breaks it. It reads one snapshot (REPEATABLE READ): a
// retention pass committing meanwhile would otherwise move the head's cut past the records
// read, and the first record kept would look like it follows nothing.
func (a *AuditTrail) Verify(ctx context.Context) (AuditVerification, error) {
	var out AuditVerification
	opts := txmanager.ReadOnlyOptions().WithTraceName("audit.verify").WithTimeout(verifyTimeout)
	opts.Isolation = pgx.RepeatableRead
	err := a.tx.WithinReadOnlyTx(ctx, opts, func(ctx context.Context, sess txmanager.Session) error {
		var err error
		out, err = a.verify(ctx, sess)
		return err
	})
	return out, err
}

func (a *AuditTrail) verify(ctx context.Context, sess txmanager.Session) (AuditVerification, error) {
	head, err := a.store.Head(ctx, sess)
	if err != nil {
		return AuditVerification{}, err
	}
	out := AuditVerification{Head: head}
	prevSeq, prevHash := head.PrunedThroughSeq, head.PrunedThroughHash
	for {
		page, err := a.store.List(ctx, sess, AuditFilter{AfterSeq: prevSeq, Limit: verifyPage})
		if err != nil {
			return out, err
		}
		// Records appended since the head was read are the next check's: stop at the head.
		for len(page) > 0 && page[len(page)-1].Seq > head.LastSeq {
			page = page[:len(page)-1]
		}
		if len(page) == 0 {
			break
		}
		// Each page is checked as a chain from the record before it; the head is checked
		// once the last page is read.
		end := page[len(page)-1]
		if br := domain.VerifyAuditChain(page, prevSeq, prevHash, end.Seq, end.Hash); br != nil {
			out.FirstBad = br
			out.Checked += br.Seq - prevSeq - 1
			return out, nil
		}
		out.Checked += int64(len(page))
		prevSeq, prevHash = end.Seq, end.Hash
	}
	if br := domain.VerifyAuditChain(nil, prevSeq, prevHash, head.LastSeq, head.LastHash); br != nil {
		out.FirstBad = br
	}
	return out, nil
}

// Prune applies the trail's own retention: records older than keep go, and the pruning is
// recorded as the trail's newest record. The transactions' pruning never touches the trail.
func (a *AuditTrail) Prune(ctx context.Context, keep time.Duration) (int64, error) {
	var pruned int64
	err := a.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("audit.prune"), func(ctx context.Context, sess txmanager.Session) error {
		n, err := a.store.Prune(ctx, sess, a.clock.Now().Add(-keep))
		if err != nil || n == 0 {
			pruned = 0
			return err
		}
		pruned = n
		return a.Record(ctx, sess, "retention:"+a.node, domain.AuditTrailPruned, "audit", nil, map[string]any{"pruned": n, "olderThan": keep.String()})
	})
	return pruned, err
}

// auditJSON is a record's before or after document ("" for nil).
func auditJSON(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case []byte:
		return string(v)
	}
	out, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprintf("%q", fmt.Sprint(v))
	}
	return string(out)
}
