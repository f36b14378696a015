package writer_test

import (
	"context"
	"errors"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/test/testsupport"

	"github.com/bionicotaku/txmanager-service/internal/writer"
)

func TestBatchIdempotencyConsumesNoNonceForReplaysOrConflicts(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(3)

	first, errs := testsupport.Results(t, node.Allocate(t, signer, 2, "order-1", "order-2"))
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	// The lease check found none of the new ids on record: the batch read no transactions.
	if got := node.Store.Lookups.Load(); got != 0 {
		t.Errorf("a batch of new request ids looked them up %d times, want 0", got)
	}

	// One batch mixing: a replay of order-1 (same intent), a conflict on order-2 (different
	// intent), a new order-3 twice (second is an in-batch replay), and one without requestId.
	mk := func(id string, value int64) *writer.Op {
		req := domain.CreateRequest{Signer: signer, RequestID: id, Intent: domain.Intent{To: &signer, Value: big.NewInt(value), GasLimit: 21000}}
		return writer.NewOp(t.Context(), req, 21000)
	}
	ops := []*writer.Op{
		mk("order-1", 1),   // same intent as the first batch's op 0 (value 1)
		mk("order-2", 999), // first batch's op 1 had value 2
		mk("order-3", 7),
		mk("order-3", 7),
		mk("order-4", 8),
		mk("order-4", 9), // in-batch conflict with the op before
		mk("", 5),
	}
	node.Allocator.AllocateBatch(context.Background(), ops)
	if got := node.Store.Lookups.Load(); got != 1 {
		t.Errorf("a batch with retries looked them up %d times, want 1", got)
	}

	type want struct {
		created  bool
		err      error
		sameAsOp int // index into ops whose tx this must equal (-1: first batch's tx, -2: none)
		nonce    uint64
	}
	wants := []want{
		{created: false, nonce: first[0].Nonce, sameAsOp: -1},
		{err: domain.ErrIdempotencyConflict, sameAsOp: -2},
		{created: true, nonce: 2, sameAsOp: -2},
		{created: false, nonce: 2, sameAsOp: 2},
		{created: true, nonce: 3, sameAsOp: -2},
		{err: domain.ErrIdempotencyConflict, sameAsOp: -2},
		{created: true, nonce: 4, sameAsOp: -2},
	}
	ctx := context.Background()
	txs := make([]domain.ManagedTx, len(ops))
	for i, op := range ops {
		tx, created, err := op.Wait(ctx)
		txs[i] = tx
		w := wants[i]
		if w.err != nil {
			if !errors.Is(err, w.err) {
				t.Errorf("op %d: err = %v, want %v", i, err, w.err)
			}
			continue
		}
		if err != nil || created != w.created || tx.Nonce != w.nonce {
			t.Errorf("op %d: created=%v nonce=%d err=%v; want created=%v nonce=%d", i, created, tx.Nonce, err, w.created, w.nonce)
		}
		switch {
		case w.sameAsOp == -1 && tx.ID != first[0].ID:
			t.Errorf("op %d: replay returned tx %s, want the original %s", i, tx.ID, first[0].ID)
		case w.sameAsOp >= 0 && tx.ID != txs[w.sameAsOp].ID:
			t.Errorf("op %d: in-batch replay returned %s, want %s", i, tx.ID, txs[w.sameAsOp].ID)
		}
	}
	// Nonces stay contiguous: conflicts and replays consumed none.
	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 1}, {Nonce: 4, Token: 1}}, 5)
}

func TestFailedBatchWritesNothingAndEvictsTheCache(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(4)
	if _, errs := testsupport.Results(t, node.Allocate(t, signer, 3)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	// Break the next insert: a row already sitting at nonce 3 makes the batch's insert fail
	// on the unique (signer, nonce) index after the lease check and nothing of it may stay.
	if _, err := pool.Exec(context.Background(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
		VALUES (1337, gen_random_uuid(), $1, '\x00', 3, '{"value":"0"}', 'ALLOCATED', 1)`, signer.Hex()); err != nil {
		t.Fatal(err)
	}
	_, errs := testsupport.Results(t, node.Allocate(t, signer, 2))
	for _, err := range errs {
		if !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("op err = %v, want UNAVAILABLE for a failed batch", err)
		}
	}
	var cursor int64
	if err := pool.QueryRow(context.Background(), "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer.Hex()).Scan(&cursor); err != nil || cursor != 3 {
		t.Fatalf("cursor = %d (%v), want 3: the failed batch must not move it", cursor, err)
	}
	// With the obstacle removed the next batch reuses nothing and skips nothing: it starts at
	// the database cursor because the failure evicted the cache.
	if _, err := pool.Exec(context.Background(), "DELETE FROM managed_tx WHERE signer = $1 AND nonce = 3", signer.Hex()); err != nil {
		t.Fatal(err)
	}
	txs, errs := testsupport.Results(t, node.Allocate(t, signer, 1))
	if err := errors.Join(errs...); err != nil || txs[0].Nonce != 3 {
		t.Fatalf("after recovery nonce = %d (%v), want 3", txs[0].Nonce, err)
	}
}

// A signer's batch with its cursor cached is written in one statement (WriteClearAllocations)
// and makes no separate lease check; a batch the database has something to settle for (a
// retried request id) finds nothing written by it and takes the full path, with the same
// answers the full path always gave.
func TestBatchWithACachedCursorIsOneStatement(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(61)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})

	steps := []struct {
		name            string
		ids             []string
		wantNonces      []uint64
		wantCreated     []bool
		wantLeaseChecks int64 // after the step
		wantClearWrites int64
	}{
		{name: "first batch: nothing cached, the full path", ids: []string{"a", "b"}, wantNonces: []uint64{0, 1}, wantCreated: []bool{true, true}, wantLeaseChecks: 1},
		{name: "cursor cached: one statement", ids: []string{"c", "d", "e"}, wantNonces: []uint64{2, 3, 4}, wantCreated: []bool{true, true, true}, wantLeaseChecks: 1, wantClearWrites: 1},
		{name: "a retry among new ids: the full path answers it", ids: []string{"f", "a"}, wantNonces: []uint64{5, 0}, wantCreated: []bool{true, false}, wantLeaseChecks: 2, wantClearWrites: 1},
		{name: "cursor cached again: one statement", ids: []string{"g"}, wantNonces: []uint64{6}, wantCreated: []bool{true}, wantLeaseChecks: 2, wantClearWrites: 2},
	}
	for _, step := range steps {
		ops := make([]batchOp, len(step.ids))
		for i, id := range step.ids {
			ops[i] = batchOp{signer: signer, id: id}
		}
		allocateBatch(t, node, step.name, ops, step.wantNonces, step.wantCreated)
		if got, want := node.Store.LeaseChecks.Load(), step.wantLeaseChecks; got != want {
			t.Errorf("%s: %d full-path lease checks so far, want %d", step.name, got, want)
		}
		if got, want := node.Store.ClearWrites.Load(), step.wantClearWrites; got != want {
			t.Errorf("%s: %d one-statement batches so far, want %d", step.name, got, want)
		}
	}
	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 1}, {Nonce: 4, Token: 1}, {Nonce: 5, Token: 1}, {Nonce: 6, Token: 1}}, 7)
}

// A batch of several signers with their cursors cached is written in one statement for all
// of them; a signer the database has something to settle for (a retried request id) is
// turned away alone and takes the full path in the same transaction, while the others'
// parts stand.
func TestBatchOfSeveralSignersIsOneStatement(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signers := []common.Address{testsupport.SignerAddress(71), testsupport.SignerAddress(72), testsupport.SignerAddress(73)}
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})

	type op struct {
		signer int
		id     string
	}
	steps := []struct {
		name            string
		ops             []op
		wantNonces      []uint64
		wantCreated     []bool
		wantLeaseChecks int64 // after the step
		wantClearCalls  int64
		wantClearWrites int64
	}{
		{name: "first batch: nothing cached, the full path for each", ops: []op{{0, "a0"}, {1, "a1"}, {2, "a2"}},
			wantNonces: []uint64{0, 0, 0}, wantCreated: []bool{true, true, true}, wantLeaseChecks: 3},
		{name: "cursors cached: one statement for three signers", ops: []op{{0, "b0"}, {1, "b1"}, {2, "b2"}, {0, "c0"}},
			wantNonces: []uint64{1, 1, 1, 2}, wantCreated: []bool{true, true, true, true}, wantLeaseChecks: 3, wantClearCalls: 1, wantClearWrites: 3},
		{name: "a retry for one signer: it alone takes the full path", ops: []op{{0, "d0"}, {1, "a1"}, {1, "d1"}, {2, "d2"}},
			wantNonces: []uint64{3, 0, 2, 2}, wantCreated: []bool{true, false, true, true}, wantLeaseChecks: 4, wantClearCalls: 2, wantClearWrites: 5},
	}
	for _, step := range steps {
		ops := make([]batchOp, len(step.ops))
		for i, o := range step.ops {
			ops[i] = batchOp{signer: signers[o.signer], id: o.id}
		}
		allocateBatch(t, node, step.name, ops, step.wantNonces, step.wantCreated)
		if got, want := node.Store.LeaseChecks.Load(), step.wantLeaseChecks; got != want {
			t.Errorf("%s: %d full-path lease checks so far, want %d", step.name, got, want)
		}
		if got, want := node.Store.ClearCalls.Load(), step.wantClearCalls; got != want {
			t.Errorf("%s: %d one-statement calls so far, want %d", step.name, got, want)
		}
		if got, want := node.Store.ClearWrites.Load(), step.wantClearWrites; got != want {
			t.Errorf("%s: %d signers' parts written in one statement so far, want %d", step.name, got, want)
		}
	}
	testsupport.AssertSignerRows(t, pool, signers[0].Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 1}}, 4)
	testsupport.AssertSignerRows(t, pool, signers[1].Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}}, 3)
	testsupport.AssertSignerRows(t, pool, signers[2].Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}}, 3)
}

// batchOp is one create of a writer batch: its signer and request id. The id's length is its
// value, so a retry of an id is the same request.
type batchOp struct {
	signer common.Address
	id     string
}

// allocateBatch runs ops as one writer batch and checks each answer's nonce and whether it
// created a transaction.
func allocateBatch(t *testing.T, n *testsupport.WriterNode, step string, ops []batchOp, wantNonces []uint64, wantCreated []bool) {
	t.Helper()
	allocations := make([]*writer.Op, len(ops))
	for i, o := range ops {
		allocations[i] = writer.NewOp(context.Background(), domain.CreateRequest{Signer: o.signer, SignerHex: o.signer.Hex(), RequestID: o.id,
			Intent: domain.Intent{To: &o.signer, Value: big.NewInt(int64(len(o.id))), GasLimit: 21000}}, 21000)
	}
	n.Allocator.AllocateBatch(context.Background(), allocations)
	for i, op := range allocations {
		tx, created, err := op.Wait(context.Background())
		if err != nil || tx.Nonce != wantNonces[i] || created != wantCreated[i] {
			t.Fatalf("%s: %s of %s answered nonce %d created %v (%v), want nonce %d created %v", step, ops[i].id, ops[i].signer.Hex(), tx.Nonce, created, err, wantNonces[i], wantCreated[i])
		}
	}
}

// A batch transaction plans its allocation statement once per connection, whatever the
// batch's size: the generic plan is forced for it (batchOptions).
func TestBatchesKeepOnePlan(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 }) // one session: its prepared statements
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer := testsupport.SignerAddress(5)
	for i, size := range []int{1, 40, 3, 17, 1, 64, 2, 9} {
		if _, errs := testsupport.Results(t, node.Allocate(t, signer, size)); errors.Join(errs...) != nil {
			t.Fatalf("batch %d: %v", i, errors.Join(errs...))
		}
	}
	var generic, custom int64
	if err := pool.QueryRow(context.Background(), `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%name: WriteClearAllocations %'`).Scan(&generic, &custom); err != nil {
		t.Fatalf("the allocation statement's plans: %v", err)
	}
	// The first batch has no cached nonce and takes the full path; the others are clear.
	if custom != 0 || generic != 7 {
		t.Errorf("7 clear batches ran %d custom plans and %d generic ones; want 0 and 7", custom, generic)
	}
}
