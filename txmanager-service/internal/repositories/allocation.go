package repositories

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// AllocationRepository implements services.AllocationStore on the batch's session.
type AllocationRepository struct {
	chainID int64
}

// NewAllocationRepository builds the repository.
func NewAllocationRepository(chain services.ChainID) *AllocationRepository {
	return &AllocationRepository{chainID: chain.Int64()}
}

// LockLeaseAndReadCursor implements services.AllocationStore.
func (r AllocationRepository) LockLeaseAndReadCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease, requestIDs []string) (services.CursorState, error) {
	signer, node, token := leaseArgs(lease)
	row, err := sqlcdb.New(sess.DB()).LockLeaseAndReadCursor(ctx, sqlcdb.LockLeaseAndReadCursorParams{ChainID: r.chainID, Signer: signer, NodeID: node, FencingToken: token, RequestIds: requestIDs})
	if errors.Is(err, pgx.ErrNoRows) {
		return r.leaseNotHeld(ctx, sess, lease)
	}
	if err != nil {
		return services.CursorState{}, fmt.Errorf("lease check: %w", err)
	}
	rosterState, paused := strings.CutSuffix(row.RosterState, " paused")
	state := services.CursorState{Quarantined: row.Quarantine != "", Releasing: row.Quarantine == "releasing", HasUnclaimed: row.HasUnclaimed,
		Retired: !domain.RosterState(rosterState).AcceptsCreates(), Paused: paused, KnownRequests: int(row.KnownRequests)}
	if row.NextNonce.Valid {
		next := uint64(row.NextNonce.Int64)
		state.Next = &next
	}
	return state, nil
}

// leaseNotHeld answers a batch whose lease check found the lease gone. A signer that has
// finished retiring has its lease let go by the node that held it (services.SignerRoster),
// so a create that passed the node's roster check just before is answered with the
// retirement, as one a moment later would be, and not FENCED, which would invite a retry
// that can only be refused. Nothing is written for the signer either way, and the roster
// state is read only on this rare path. Any other signer's batch is fenced.
func (r AllocationRepository) leaseNotHeld(ctx context.Context, sess txmanager.Session, lease domain.Lease) (services.CursorState, error) {
	roster, err := sqlcdb.New(sess.DB()).GetRosterSigner(ctx, lease.Signer)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return services.CursorState{}, fmt.Errorf("lease check: roster state: %w", err)
	}
	if err == nil && !domain.RosterState(roster.State).AcceptsCreates() {
		return services.CursorState{Retired: true}, nil
	}
	return services.CursorState{}, fencedError(lease, "lease check")
}

// Quarantine implements services.AllocationStore.
func (r AllocationRepository) Quarantine(ctx context.Context, sess txmanager.Session, lease domain.Lease, dbNext, chainNext uint64) (bool, error) {
	return quarantine(ctx, sqlcdb.New(sess.DB()), r.chainID, lease, dbNext, chainNext)
}

// quarantine records a quarantine with the lease held (the one fenced write of it).
func quarantine(ctx context.Context, q *sqlcdb.Queries, chainID int64, lease domain.Lease, dbNext, chainNext uint64) (bool, error) {
	p := sqlcdb.QuarantineSignerParams{DbNextNonce: int64(dbNext), ChainNonce: int64(chainNext)}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = chainID
	row, err := q.QuarantineSigner(ctx, p)
	if _, err := fencedOutcome(lease, "quarantine", row.LeaseHeld, 0, err); err != nil {
		return false, err
	}
	return row.Quarantined, nil
}

// FindByRequestIDs implements services.AllocationStore.
func (r AllocationRepository) FindByRequestIDs(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string) (map[string]domain.ManagedTx, error) {
	rows, err := sqlcdb.New(sess.DB()).FindTxsByRequestIDs(ctx, sqlcdb.FindTxsByRequestIDsParams{ChainID: r.chainID, Signer: signer.Hex(), RequestIds: requestIDs})
	if err != nil {
		return nil, fmt.Errorf("find by request ids: %w", err)
	}
	out := make(map[string]domain.ManagedTx, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out[tx.RequestID] = tx
	}
	if len(out) == len(requestIDs) {
		return out, nil
	}
	// An intent waiting for approval, or decided without a transaction, holds its request
	// id as an approval request; one admitted has its transaction above.
	approvals, err := sqlcdb.New(sess.DB()).FindApprovalsByRequestIDs(ctx, sqlcdb.FindApprovalsByRequestIDsParams{ChainID: r.chainID, Signer: signer.Hex(), RequestIds: requestIDs})
	if err != nil {
		return nil, fmt.Errorf("find approvals by request ids: %w", err)
	}
	for _, row := range approvals {
		approval, err := approvalOf(row)
		if err != nil {
			return nil, err
		}
		if _, ok := out[approval.RequestID]; !ok {
			out[approval.RequestID] = approval.AsTx()
		}
	}
	return out, nil
}

// WriteAllocation implements services.AllocationStore: one fenced statement inserts the
// signer's new transactions and advances its cursor to next.
func (r AllocationRepository) WriteAllocation(ctx context.Context, sess txmanager.Session, lease domain.Lease, txs []domain.ManagedTx, next uint64) error {
	rows, err := allocationRows(txs)
	if err != nil {
		return err
	}
	params := sqlcdb.WriteAllocationParams{TxIds: rows.ids, RequestIds: rows.requestIDs, IntentHashes: rows.intentHashes, Nonces: rows.nonces,
		Payloads: rows.payloads, NextNonce: int64(next), CreatedAt: rows.createdAt, ChainID: r.chainID}
	params.Signer, params.NodeID, params.FencingToken = leaseArgs(lease)
	row, err := sqlcdb.New(sess.DB()).WriteAllocation(ctx, params)
	if err != nil {
		return fmt.Errorf("write allocation: %w", err)
	}
	if row.Inserted == 0 && row.CursorAdvanced == 0 {
		return fencedError(lease, "allocation")
	}
	return allocationWritten(row.Inserted, row.CursorAdvanced, len(txs), 1)
}

// WriteClearAllocations implements services.AllocationStore: the gated one-statement
// allocation of the common case for a batch's signers (WriteClearAllocations in
// queries/tx.sql).
func (r AllocationRepository) WriteClearAllocations(ctx context.Context, sess txmanager.Session, parts []services.ClearAllocation) ([]bool, error) {
	if len(parts) == 0 {
		return nil, nil
	}
	params := sqlcdb.WriteClearAllocationsParams{ChainID: r.chainID, NodeID: parts[0].Lease.Owner,
		Signers: make([]string, len(parts)), FencingTokens: make([]int64, len(parts)), ExpectedNexts: make([]int64, len(parts)),
		NextNonces: make([]int64, len(parts)), CreatedAts: make([]time.Time, len(parts))}
	var txs []domain.ManagedTx
	for i, part := range parts {
		if part.Lease.Owner != params.NodeID {
			return nil, fmt.Errorf("write clear allocations: leases of two nodes (%s, %s) in one batch", params.NodeID, part.Lease.Owner)
		}
		if len(part.Txs) == 0 {
			return nil, fmt.Errorf("write clear allocations: no transactions for %s", part.Lease.Signer)
		}
		params.Signers[i], params.FencingTokens[i] = part.Lease.Signer, int64(part.Lease.Token)
		params.ExpectedNexts[i], params.NextNonces[i] = int64(part.ExpectedNext), int64(part.Next)
		// One timestamp for each signer's part, the one its callers were answered with.
		params.CreatedAts[i] = part.Txs[0].CreatedAt
		for range part.Txs {
			params.RowSigners = append(params.RowSigners, part.Lease.Signer)
		}
		for _, credential := range part.Credentials {
			params.CredentialSigners = append(params.CredentialSigners, part.Lease.Signer)
			params.Credentials = append(params.Credentials, credential)
		}
		txs = append(txs, part.Txs...)
	}
	rows, err := allocationRows(txs)
	if err != nil {
		return nil, err
	}
	params.TxIds, params.TxRequestIds, params.IntentHashes, params.Nonces, params.Payloads = rows.ids, rows.requestIDs, rows.intentHashes, rows.nonces, rows.payloads
	row, err := sqlcdb.New(sess.DB()).WriteClearAllocations(ctx, params)
	if err != nil {
		return nil, fmt.Errorf("write clear allocations: %w", err)
	}
	written := make([]bool, len(parts))
	want := 0
	for i, part := range parts {
		written[i] = slices.Contains(row.ClearSigners, part.Lease.Signer)
		if written[i] {
			want += len(part.Txs)
		}
	}
	if err := allocationWritten(row.Inserted, row.CursorAdvanced, want, len(row.ClearSigners)); err != nil {
		return nil, err
	}
	return written, nil
}

// allocationWritten checks that an allocation wrote every transaction of the signers whose
// lease held (or whose gate was clear) and moved each of their cursors once.
func allocationWritten(inserted, cursorsAdvanced int64, wantRows, wantCursors int) error {
	if inserted != int64(wantRows) || cursorsAdvanced != int64(wantCursors) {
		// A signer's lease held but its cursor was not where its transactions were numbered
		// from, which max(chain, cache, db) and the clear path's gate rule out: refuse to
		// commit rather than reuse a nonce.
		return fmt.Errorf("allocation wrote %d of %d transactions, advanced %d of %d cursors: refusing to commit",
			inserted, wantRows, cursorsAdvanced, wantCursors)
	}
	return nil
}

// allocationColumns are a batch's new transactions as the allocation statements' arrays.
type allocationColumns struct {
	ids, requestIDs, payloads []string
	intentHashes              [][]byte
	nonces                    []int64
	createdAt                 time.Time
}

func allocationRows(txs []domain.ManagedTx) (allocationColumns, error) {
	c := allocationColumns{
		ids:          make([]string, len(txs)),
		requestIDs:   make([]string, len(txs)),
		intentHashes: make([][]byte, len(txs)),
		nonces:       make([]int64, len(txs)),
		payloads:     make([]string, len(txs)),
		// One timestamp for the batch, the one the callers were answered with.
		createdAt: txs[0].CreatedAt,
	}
	for i, tx := range txs {
		payload, err := encodePayload(tx)
		if err != nil {
			return c, fmt.Errorf("encode payload: %w", err)
		}
		// Text, not uuid.UUID: pgx encodes a driver.Valuer element by element through
		// reflection, which costs more than the rest of the batch's encoding.
		c.ids[i] = tx.ID.String()
		// request_id '' stands for "none": a text[] parameter cannot carry NULLs here.
		c.requestIDs[i] = tx.RequestID
		c.intentHashes[i] = tx.Fingerprint[:]
		c.nonces[i] = int64(tx.Nonce)
		// Text, cast to jsonb in SQL: a []byte would go out as bytea in the exec and
		// simple-protocol modes a transaction pooler needs.
		c.payloads[i] = string(payload)
	}
	return c, nil
}

// FindUnclaimed implements services.AllocationStore.
func (r AllocationRepository) FindUnclaimed(ctx context.Context, sess txmanager.Session, signer common.Address, keys [][32]byte) ([]domain.ManagedTx, error) {
	p := sqlcdb.FindUnclaimedParams{ChainID: r.chainID, Signer: signer.Hex(), RecoveryKeys: make([][]byte, len(keys))}
	for i := range keys {
		p.RecoveryKeys[i] = keys[i][:]
	}
	rows, err := sqlcdb.New(sess.DB()).FindUnclaimed(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("find unclaimed: %w", err)
	}
	return toDomainRows(rows)
}

// ClaimUnclaimed implements services.AllocationStore.
func (r AllocationRepository) ClaimUnclaimed(ctx context.Context, sess txmanager.Session, lease domain.Lease, claims []services.Adoption) error {
	p := sqlcdb.ClaimUnclaimedParams{TxIds: make([]string, len(claims)), RequestIds: make([]string, len(claims)), IntentHashes: make([][]byte, len(claims))}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for i, c := range claims {
		p.TxIds[i], p.RequestIds[i], p.IntentHashes[i] = c.TxID.String(), c.RequestID, c.Fingerprint[:]
	}
	row, err := sqlcdb.New(sess.DB()).ClaimUnclaimed(ctx, p)
	n, err := fencedOutcome(lease, "adoption", row.LeaseHeld, row.Claimed, err)
	if err != nil {
		return err
	}
	if n != len(claims) {
		// The rows were found adoptable and locked in this transaction: anything else means
		// the batch must not answer with them.
		return fmt.Errorf("adoption claimed %d of %d recovered transactions: refusing to commit", n, len(claims))
	}
	return nil
}
