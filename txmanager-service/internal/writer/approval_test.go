package writer_test

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// approvalStage is one node's writer over a database of its own, with the policy book and
// the approval desk its votes go through.
func approvalStage(t *testing.T) (*pgxpool.Pool, *testsupport.WriterNode, *services.PolicyBook, *services.ApprovalDesk) {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	trail := testsupport.AuditTrail(t, pool, "node-a")
	return pool, node, testsupport.PolicyBook(t, pool, trail), testsupport.ApprovalDesk(t, pool, trail, "node-a")
}

// An intent above a policy's approval threshold waits without a nonce; its retries are
// answered with the same approval; two distinct approvers holding the role admit it (the
// requester, a credential without the role, and a second vote by the same approver are
// refused); the admission gives it the next nonce under the approval's id exactly once; a
// rejection and an expiry end others for good, each with its completion.
func TestApprovalWaitsWithoutANonceAndIsAdmittedOnce(t *testing.T) {
	t.Parallel()
	pool, node, book, desk := approvalStage(t)
	ctx := t.Context()
	signer := testsupport.SignerAddress(400)
	if _, err := book.Set(ctx, "signer", signer.Hex(), []byte(`{"maxValuePerTx":"100000","approval":{"aboveValue":"1000","approvers":2,"expiresAfter":"1h"}}`), "ops"); err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	create := func(requestID string, value int64, approval domain.Approval) (domain.ManagedTx, bool, error) {
		adm := domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(100), ApprovalID: approval.ID}
		return allocateOne(t, node, domain.CreateRequest{Signer: signer, RequestID: requestID, Intent: domain.Intent{To: &to, Value: big.NewInt(value), GasLimit: 21000}, Admission: adm}, 21000)
	}
	principal := func(id string, roles ...string) domain.Principal {
		p := domain.Principal{ID: id, AllSigners: true, Roles: map[string]bool{}}
		for _, r := range roles {
			p.Roles[r] = true
		}
		return p
	}

	if tx, _, err := create("small", 1000, domain.Approval{}); err != nil || tx.Nonce != 0 || tx.State != domain.StateAllocated {
		t.Fatalf("a create at the threshold: %+v %v, want allocated at nonce 0", tx, err)
	}
	waiting, created, err := create("big", 5000, domain.Approval{})
	if err != nil || !created || waiting.State != domain.StateAwaitingApproval {
		t.Fatalf("a create above the threshold: state %s created %v err %v, want AWAITING_APPROVAL", waiting.State, created, err)
	}
	if tx, _, err := create("after", 10, domain.Approval{}); err != nil || tx.Nonce != 1 {
		t.Fatalf("the next create took nonce %d (%v): the waiting intent must not hold one", tx.Nonce, err)
	}
	if again, created, err := create("big", 5000, domain.Approval{}); err != nil || created || again.ID != waiting.ID {
		t.Fatalf("the waiting request's retry: id %s created %v err %v, want the same approval %s", again.ID, created, err, waiting.ID)
	}
	// A retry answered before the writer (refused there for now: another node's signer, a
	// chain that does not answer) reads its request id as the writer does.
	if found, err := repositories.NewTxRepository(pool, testsupport.TestChain()).GetByRequestID(ctx, signer, "big"); err != nil || found.ID != waiting.ID || found.State != domain.StateAwaitingApproval {
		t.Fatalf("the waiting request's id read outside the writer: %s %s, %v; want the approval %s", found.ID, found.State, err, waiting.ID)
	}
	for _, value := range []int64{5001, 10} {
		// 10 is under the threshold: no approval needed, yet the request id is taken.
		if tx, _, err := create("big", value, domain.Approval{}); !errors.Is(err, domain.ErrIdempotencyConflict) {
			t.Fatalf("another intent (value %d) under the waiting request id: %s at nonce %d, %v; want IDEMPOTENCY_CONFLICT", value, tx.State, tx.Nonce, err)
		}
	}
	if _, _, err := create("too-big", 200000, domain.Approval{}); !errors.Is(err, domain.ErrPolicyDenied) {
		t.Fatalf("an intent the other rules refuse: %v, want POLICY_DENIED rather than a wait", err)
	}

	id := waiting.ID.String()
	votes := []struct {
		name    string
		voter   domain.Principal
		approve bool
		wantErr error
		want    domain.ApprovalState
	}{
		{"the requester", principal("payouts", "approver"), true, domain.ErrApprovalForbidden, ""},
		{"a credential without the role", principal("carol", "treasury"), true, domain.ErrApprovalForbidden, ""},
		{"a credential not granted the signer", domain.Principal{ID: "dave", Roles: map[string]bool{"approver": true}}, true, domain.ErrApprovalForbidden, ""},
		{"the first approver", principal("alice", "approver"), true, nil, domain.ApprovalAwaiting},
		{"the first approver again", principal("alice", "approver"), true, domain.ErrAlreadyDecided, ""},
		{"the first approver changing its mind", principal("alice", "approver"), false, domain.ErrAlreadyDecided, ""},
		{"the second approver", principal("bob", "approver"), true, nil, domain.ApprovalApproved},
		{"a third approver, too late", principal("erin", "approver"), true, domain.ErrApprovalClosed, ""},
	}
	for _, v := range votes {
		a, err := desk.Decide(ctx, id, v.voter, v.approve, "checked the invoice")
		if v.wantErr != nil {
			if !errors.Is(err, v.wantErr) {
				t.Fatalf("%s: %v, want %v", v.name, err, v.wantErr)
			}
			t.Logf("%s: %v", v.name, err)
			continue
		}
		if err != nil || a.State != v.want {
			t.Fatalf("%s: state %s err %v, want %s", v.name, a.State, err, v.want)
		}
	}
	approved, err := desk.Get(ctx, id)
	if err != nil || approved.Approvals() != 2 || len(approved.Votes) != 2 {
		t.Fatalf("the approval after the votes: %+v %v", approved, err)
	}
	tx, created, err := create("big", 5000, approved)
	if err != nil || !created || tx.ID != approved.ID || tx.Nonce != 2 {
		t.Fatalf("the admission: id %s nonce %d created %v err %v, want the approval's id at nonce 2", tx.ID, tx.Nonce, created, err)
	}
	if a, _ := desk.Get(ctx, id); a.State != domain.ApprovalAdmitted {
		t.Fatalf("after the admission the approval is %s, want ADMITTED", a.State)
	}
	if _, created, err := create("big-again", 5000, approved); created || !errors.Is(err, domain.ErrApprovalClosed) {
		t.Fatalf("a second admission of the same approval: created %v err %v, want APPROVAL_CLOSED", created, err)
	}

	rejected, _, err := create("rejected", 7000, domain.Approval{})
	if err != nil {
		t.Fatal(err)
	}
	if a, err := desk.Decide(ctx, rejected.ID.String(), principal("bob", "approver"), false, "not ours"); err != nil || a.State != domain.ApprovalRejected {
		t.Fatalf("a rejection: %s %v", a.State, err)
	}
	if again, created, err := create("rejected", 7000, domain.Approval{}); err != nil || created || again.ID != rejected.ID || again.State != domain.StateRejected {
		t.Fatalf("the rejected request's retry: %s %s created %v err %v, want the rejection itself", again.ID, again.State, created, err)
	}
	if tx, _, err := create("rejected", 10, domain.Approval{}); !errors.Is(err, domain.ErrIdempotencyConflict) {
		t.Fatalf("another intent under a rejected request id: %s at nonce %d, %v; want IDEMPOTENCY_CONFLICT", tx.State, tx.Nonce, err)
	}
	expiring, _, err := create("expiring", 8000, domain.Approval{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tx_approval SET expires_at = now() - interval '1 second' WHERE approval_id = $1`, expiring.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := desk.Decide(ctx, expiring.ID.String(), principal("alice", "approver"), true, ""); !errors.Is(err, domain.ErrApprovalClosed) {
		t.Fatalf("a vote after the expiry: %v, want APPROVAL_CLOSED", err)
	}
	if err := desk.ExpirePass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, end := range []struct {
		id    string
		state domain.ApprovalState
	}{{rejected.ID.String(), domain.ApprovalRejected}, {expiring.ID.String(), domain.ApprovalExpired}} {
		a, err := desk.Get(ctx, end.id)
		if err != nil || a.State != end.state || a.FinalReason == "" || !a.AsTx().State.Final() {
			t.Fatalf("approval %s: %s (%q) %v, want %s with a reason, final", end.id, a.State, a.FinalReason, err, end.state)
		}
		var status string
		if err := pool.QueryRow(ctx, `SELECT status FROM tx_completions WHERE tx_id = $1`, a.ID).Scan(&status); err != nil || status != string(end.state) {
			t.Fatalf("completion of %s: %q %v, want %s", end.id, status, err, end.state)
		}
		t.Logf("%s: %s", end.state, a.FinalReason)
	}
	var cursor int64
	if err := pool.QueryRow(ctx, `SELECT max(next_nonce) FROM signer_nonce_cursor WHERE signer = $1`, signer.Hex()).Scan(&cursor); err != nil || cursor != 3 {
		t.Fatalf("the signer's next nonce is %d (%v): only the three admitted creates took nonces", cursor, err)
	}
}

// A policy change applies from its commit on, to intents already approved too: one approved
// under a rule since tightened (more approvers, another role) is refused at admission, one
// under a rule since relaxed is admitted. The same approval twice in one writer batch is
// admitted once; the other is refused alone, and the batch's other creates go on.
func TestApprovedIntentsMeetThePolicyOfTheirAdmission(t *testing.T) {
	t.Parallel()
	_, node, book, desk := approvalStage(t)
	ctx := t.Context()
	to := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	request := func(signer common.Address, value int64, approval uuid.UUID) domain.CreateRequest {
		return domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(value), GasLimit: 21000},
			Admission: domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(100), ApprovalID: approval}}
	}
	approver := domain.Principal{ID: "alice", AllSigners: true, Roles: map[string]bool{"approver": true}}
	// approved asks for approval of 5000 wei from signer under rule, then applies the policy
	// later and the approver's vote.
	approved := func(t *testing.T, signer common.Address, rule, later string) domain.Approval {
		t.Helper()
		if _, err := book.Set(ctx, "signer", signer.Hex(), []byte(rule), "ops"); err != nil {
			t.Fatal(err)
		}
		waiting, _, err := allocateOne(t, node, request(signer, 5000, uuid.Nil), 21000)
		if err != nil || waiting.State != domain.StateAwaitingApproval {
			t.Fatalf("the create: %v %v, want it awaiting approval", waiting.State, err)
		}
		if later != "" {
			if _, err := book.Set(ctx, "signer", signer.Hex(), []byte(later), "ops"); err != nil {
				t.Fatal(err)
			}
		}
		a, err := desk.Decide(ctx, waiting.ID.String(), approver, true, "")
		if err != nil || a.State != domain.ApprovalApproved {
			t.Fatalf("the vote: %v %v", a.State, err)
		}
		return a
	}
	const oneApprover = `{"approval":{"aboveValue":"1000","approvers":1,"role":"approver","expiresAfter":"1h"}}`
	tests := []struct {
		name    string
		later   string
		wantErr error
	}{
		{"the rule unchanged", "", nil},
		{"tightened to three approvers of another role", `{"approval":{"aboveValue":"1000","approvers":3,"role":"treasury","expiresAfter":"1h"}}`, domain.ErrPolicyDenied},
		{"tightened to two approvers", `{"approval":{"aboveValue":"1000","approvers":2,"role":"approver","expiresAfter":"1h"}}`, domain.ErrPolicyDenied},
		{"relaxed: no approval above 10000", `{"approval":{"aboveValue":"10000","approvers":1,"role":"approver","expiresAfter":"1h"}}`, nil},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := testsupport.SignerAddress(410 + i)
			a := approved(t, signer, oneApprover, tt.later)
			tx, _, err := allocateOne(t, node, request(signer, 5000, a.ID), 21000)
			if (tt.wantErr == nil && (err != nil || tx.State != domain.StateAllocated)) || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) {
				t.Fatalf("admission: %v %v, want error %v", tx.State, err, tt.wantErr)
			}
		})
	}
	t.Run("the same approval twice in one batch", func(t *testing.T) {
		signer, other := testsupport.SignerAddress(420), testsupport.SignerAddress(421)
		a := approved(t, signer, oneApprover, "")
		ops := []*writer.Op{writer.NewOp(ctx, request(signer, 5000, a.ID), 21000), writer.NewOp(ctx, request(signer, 5000, a.ID), 21000),
			writer.NewOp(ctx, request(other, 1, uuid.Nil), 21000)}
		node.Allocator.AllocateBatch(context.Background(), ops)
		var admitted, closed, others int
		for i, op := range ops {
			tx, _, err := op.Wait(ctx)
			switch {
			case i == 2 && err == nil:
				others++
			case err == nil && tx.ID == a.ID:
				admitted++
			case errors.Is(err, domain.ErrApprovalClosed):
				closed++
			default:
				t.Errorf("op %d: %v %v", i, tx.State, err)
			}
		}
		if admitted != 1 || closed != 1 || others != 1 {
			t.Fatalf("admitted %d, refused as closed %d, other creates %d; want 1, 1, 1", admitted, closed, others)
		}
	})
}

// aheadClock is a node's clock running ahead of the database's.
type aheadClock struct{ by time.Duration }

func (c aheadClock) Now() time.Time { return time.Now().Add(c.by) }

// An approval's wait is measured by the database's clock, the one its expiry is enforced
// by: a node whose clock runs two hours ahead gives it the rule's hour from the database's
// now, not three.
func TestAnApprovalsExpiryIsTheDatabasesNowPlusTheRule(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{Clock: aheadClock{by: 2 * time.Hour}})
	book := testsupport.PolicyBook(t, pool, testsupport.AuditTrail(t, pool, "node-a"))
	signer := testsupport.SignerAddress(430)
	if _, err := book.Set(t.Context(), "signer", signer.Hex(), []byte(`{"approval":{"aboveValue":"1000","approvers":1,"expiresAfter":"1h"}}`), "ops"); err != nil {
		t.Fatal(err)
	}
	to := common.HexToAddress("0x00000000000000000000000000000000000a11ce")
	waiting, _, err := allocateOne(t, node, domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(5000), GasLimit: 21000},
		Admission: domain.Admission{Credential: "payouts", FeeCapPerGas: big.NewInt(100)}}, 21000)
	if err != nil || waiting.State != domain.StateAwaitingApproval {
		t.Fatalf("the create: %v %v", waiting.State, err)
	}
	var left time.Duration
	var seconds float64
	if err := pool.QueryRow(t.Context(), "SELECT EXTRACT(EPOCH FROM expires_at - now())::float8 FROM tx_approval WHERE approval_id = $1", waiting.ID).Scan(&seconds); err != nil {
		t.Fatal(err)
	}
	left = time.Duration(seconds * float64(time.Second))
	if left > time.Hour || left < 59*time.Minute {
		t.Fatalf("the approval expires in %v by the database's clock, want the rule's hour", left)
	}
}
