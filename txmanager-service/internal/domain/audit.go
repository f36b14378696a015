package domain

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"
)

// AuditRecord is one entry of the audit trail: who did what to which subject, the state
// before and after (JSON documents, "" where there is none), when and on which node.
type AuditRecord struct {
	Seq      int64
	At       time.Time
	Node     string
	Actor    string
	Action   string
	Subject  string
	Before   string
	After    string
	PrevHash []byte
	Hash     []byte
}

// Audit actions, as records name them.
const (
	AuditSignerAdded    = "signer.add"
	AuditSignerRetired  = "signer.retire"
	AuditSignerPaused   = "signer.pause"
	AuditSignerResumed  = "signer.resume"
	AuditSignerReleased = "signer.release"
	AuditTxResolved     = "tx.resolve"
	AuditPolicySet      = "policy.set"
	AuditPolicyDeleted  = "policy.delete"
	AuditTrailPruned    = "audit.prune"
	AuditApprovalVote   = "approval.vote"
	AuditApprovalEnded  = "approval.end"
	AuditWebhookCreated = "webhook.create"
	AuditWebhookState   = "webhook.state"
	AuditWebhookReplay  = "webhook.replay"
	AuditWebhookDeleted = "webhook.delete"
	AuditFundingSet     = "funding.set"
	AuditFundingDeleted = "funding.delete"
)

// ChainHash is the record's hash: SHA-256 over the previous record's hash and the record's
// fields in a fixed JSON array, the time in UTC to the microsecond (what PostgreSQL keeps).
// Anyone holding the records can recompute it; a record changed after it was written no
// longer matches its hash, and the next record's PrevHash no longer matches a record removed.
func (r AuditRecord) ChainHash(prev []byte) []byte {
	fields, err := json.Marshal([]any{
		r.Seq, r.At.UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z"),
		r.Node, r.Actor, r.Action, r.Subject, r.Before, r.After,
	})
	if err != nil {
		panic(fmt.Sprintf("audit record marshal: %v", err)) // strings and numbers always marshal
	}
	h := sha256.New()
	h.Write([]byte("txmanager-audit-v1"))
	h.Write(prev)
	h.Write(fields)
	return h.Sum(nil)
}

// AuditBreak is the first record of a trail whose chain does not hold, and why.
type AuditBreak struct {
	Seq    int64
	Reason string
}

// VerifyAuditChain checks records (in sequence order) against each other, starting after a
// record with sequence afterSeq and hash afterHash (0 and empty for the trail's start, or
// the last record its retention pruned), and against the head the trail recorded (the last
// record's sequence and hash). It names the first record that breaks the chain.
func VerifyAuditChain(records []AuditRecord, afterSeq int64, afterHash []byte, headSeq int64, headHash []byte) *AuditBreak {
	prevSeq, prevHash := afterSeq, afterHash
	for _, r := range records {
		if r.Seq != prevSeq+1 {
			return &AuditBreak{Seq: prevSeq + 1, Reason: fmt.Sprintf("record %d is missing (the next one is %d)", prevSeq+1, r.Seq)}
		}
		if string(r.PrevHash) != string(prevHash) {
			return &AuditBreak{Seq: r.Seq, Reason: "its previous-record hash does not match the record before it (a record before it was changed or removed)"}
		}
		if string(r.ChainHash(prevHash)) != string(r.Hash) {
			return &AuditBreak{Seq: r.Seq, Reason: "its contents do not match its hash (the record was changed)"}
		}
		prevSeq, prevHash = r.Seq, r.Hash
	}
	if prevSeq != headSeq {
		return &AuditBreak{Seq: prevSeq + 1, Reason: fmt.Sprintf("the trail ends at record %d but its head says %d (records at the end were removed)", prevSeq, headSeq)}
	}
	if string(prevHash) != string(headHash) {
		return &AuditBreak{Seq: prevSeq, Reason: "the last record's hash does not match the trail's head"}
	}
	return nil
}
