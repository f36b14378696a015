package repositories

import (
	"context"
	"errors"
	"fmt"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
)

// RosterRepository implements services.RosterStore. The roster is the cluster's, not a
// chain's: a key signs on every chain.
type RosterRepository struct {
	q *sqlcdb.Queries
}

// NewRosterRepository builds the repository on the pool.
func NewRosterRepository(pool *pgxpool.Pool) *RosterRepository {
	return &RosterRepository{q: sqlcdb.New(pool)}
}

// ListRoster implements services.RosterStore.
func (r *RosterRepository) ListRoster(ctx context.Context) ([]domain.RosterSigner, error) {
	rows, err := r.q.ListRoster(ctx)
	if err != nil {
		return nil, fmt.Errorf("list roster: %w", err)
	}
	out := make([]domain.RosterSigner, len(rows))
	for i, row := range rows {
		out[i] = toRosterSigner(row)
	}
	return out, nil
}

// GetRosterSigner implements services.RosterStore.
func (r *RosterRepository) GetRosterSigner(ctx context.Context, signer common.Address) (domain.RosterSigner, error) {
	row, err := r.q.GetRosterSigner(ctx, signer.Hex())
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.RosterSigner{}, &domain.NotFoundError{What: "signer " + signer.Hex() + " is not on the roster"}
	}
	if err != nil {
		return domain.RosterSigner{}, fmt.Errorf("roster signer %s: %w", signer.Hex(), err)
	}
	return toRosterSigner(sqlcdb.ListRosterRow(row)), nil
}

// RegisterConfigSigners implements services.RosterStore.
func (r *RosterRepository) RegisterConfigSigners(ctx context.Context, node string, signers []common.Address) error {
	hexes := make([]string, len(signers))
	for i, s := range signers {
		hexes[i] = s.Hex()
	}
	if err := r.q.RegisterConfigSigners(ctx, sqlcdb.RegisterConfigSignersParams{NodeID: node, Signers: hexes}); err != nil {
		return fmt.Errorf("register configured signers: %w", err)
	}
	return nil
}

// AddRosterSigner implements services.RosterStore.
func (r *RosterRepository) AddRosterSigner(ctx context.Context, entry domain.RosterSigner, by string) (domain.RosterSigner, bool, error) {
	row, err := r.q.AddRosterSigner(ctx, sqlcdb.AddRosterSignerParams{
		Signer: entry.Signer.Hex(), Source: string(entry.Source), KeyRef: entry.KeyRef, AddedBy: by, Note: entry.Note,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Active already: nothing changed.
		current, err := r.GetRosterSigner(ctx, entry.Signer)
		return current, false, err
	}
	if err != nil {
		return domain.RosterSigner{}, false, fmt.Errorf("add roster signer %s: %w", entry.Signer.Hex(), err)
	}
	return toRosterSigner(sqlcdb.ListRosterRow(row)), true, nil
}

// RetireRosterSigner implements services.RosterStore.
func (r *RosterRepository) RetireRosterSigner(ctx context.Context, signer common.Address, by, note string) (domain.RosterSigner, bool, error) {
	row, err := r.q.RetireRosterSigner(ctx, sqlcdb.RetireRosterSignerParams{Signer: signer.Hex(), RetiredBy: by, Note: note})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.RosterSigner{}, false, nil
	}
	if err != nil {
		return domain.RosterSigner{}, false, fmt.Errorf("retire roster signer %s: %w", signer.Hex(), err)
	}
	return toRosterSigner(sqlcdb.ListRosterRow(row)), true, nil
}

// CompleteRetirement implements services.RosterStore.
func (r *RosterRepository) CompleteRetirement(ctx context.Context, signer common.Address) (domain.RosterSigner, bool, error) {
	row, err := r.q.CompleteRetirement(ctx, signer.Hex())
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.RosterSigner{}, false, nil
	}
	if err != nil {
		return domain.RosterSigner{}, false, fmt.Errorf("complete retirement of %s: %w", signer.Hex(), err)
	}
	return toRosterSigner(sqlcdb.ListRosterRow(row)), true, nil
}

// CountUnfinished implements services.RosterStore.
func (r *RosterRepository) CountUnfinished(ctx context.Context, signer common.Address) (int64, error) {
	n, err := r.q.CountUnfinishedBySigner(ctx, signer.Hex())
	if err != nil {
		return 0, fmt.Errorf("count unfinished of %s: %w", signer.Hex(), err)
	}
	return n, nil
}

func toRosterSigner(row sqlcdb.ListRosterRow) domain.RosterSigner {
	return domain.RosterSigner{
		Signer: common.HexToAddress(row.Signer), Source: domain.KeySourceKind(row.Source), KeyRef: row.KeyRef,
		State: domain.RosterState(row.State), AddedAt: row.AddedAt, AddedBy: row.AddedBy,
		RetiringAt: row.RetiringAt, RetiredAt: row.RetiredAt, RetiredBy: row.RetiredBy, Note: row.Note, UpdatedAt: row.UpdatedAt,
		PausedAt: row.PausedAt, PausedBy: row.PausedBy, PauseNote: row.PauseNote,
	}
}

// PauseRosterSigner implements services.RosterStore, inside sess.
func (r *RosterRepository) PauseRosterSigner(ctx context.Context, sess txmanager.Session, signer common.Address, by, note string) (domain.RosterSigner, bool, error) {
	q := sqlcdb.New(sess.DB())
	row, err := q.PauseRosterSigner(ctx, sqlcdb.PauseRosterSignerParams{Signer: signer.Hex(), PausedBy: by, Note: note})
	return pauseOutcome(ctx, q, signer, "pause", sqlcdb.ListRosterRow(row), err)
}

// ResumeRosterSigner implements services.RosterStore, inside sess.
func (r *RosterRepository) ResumeRosterSigner(ctx context.Context, sess txmanager.Session, signer common.Address) (domain.RosterSigner, bool, error) {
	q := sqlcdb.New(sess.DB())
	row, err := q.ResumeRosterSigner(ctx, signer.Hex())
	return pauseOutcome(ctx, q, signer, "resume", sqlcdb.ListRosterRow(row), err)
}

// pauseOutcome answers a pause or a resume: the changed row, or (no row: nothing to
// change) the row as it stands, or not found.
func pauseOutcome(ctx context.Context, q *sqlcdb.Queries, signer common.Address, what string, row sqlcdb.ListRosterRow, err error) (domain.RosterSigner, bool, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		current, err := q.GetRosterSigner(ctx, signer.Hex())
		if errors.Is(err, pgx.ErrNoRows) {
			return domain.RosterSigner{}, false, &domain.NotFoundError{What: "signer " + signer.Hex() + " is not on the roster"}
		}
		if err != nil {
			return domain.RosterSigner{}, false, fmt.Errorf("%s %s: %w", what, signer.Hex(), err)
		}
		return toRosterSigner(sqlcdb.ListRosterRow(current)), false, nil
	}
	if err != nil {
		return domain.RosterSigner{}, false, fmt.Errorf("%s %s: %w", what, signer.Hex(), err)
	}
	return toRosterSigner(row), true, nil
}
