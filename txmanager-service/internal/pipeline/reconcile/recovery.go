package reconcile

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// RecoveredTx is a transaction found on chain at a nonce the database lost, as a row and
// its attempt.
type RecoveredTx struct {
	Tx      domain.ManagedTx
	Attempt pipeline.SignedAttempt
}

// maxRecoveredPerPass bounds the nonces one pass looks up and records for a signer; a
// longer run is finished by the passes after it.
const maxRecoveredPerPass = 512

// RecoverFromChain settles a quarantined signer without a person (recovery.mode
// adopt-by-intent): every transaction the chain holds at a nonce the database does not
// know is recorded as an unclaimed row of its own, followed to finality like any other and
// adoptable by a retried create with the same intent for the adoption window; once each
// unknown nonce has its row, the cursor moves past the chain's nonce and the quarantine is
// released, so the signer serves again. A nonce whose transaction the chain does not show
// yet keeps the signer quarantined until it does. It returns how many rows it recorded.
func (r *Reconciler) RecoverFromChain(ctx context.Context, lease domain.Lease, unknown NonceRange) (int, error) {
	if !r.cfg.RecoverByIntent {
		return 0, nil
	}
	dbNext, chainNonce := unknown.From, unknown.To
	ctx, span := pipeline.Span(ctx, r.metrics, "pipeline.recover", lease)
	defer span.End()
	to := min(chainNonce, dbNext+maxRecoveredPerPass)
	nonces := make([]uint64, 0, to-dbNext)
	for n := dbNext; n < to; n++ {
		nonces = append(nonces, n)
	}
	signer := common.HexToAddress(lease.Signer)
	found, err := r.chain.SentTransactions(ctx, signer, nonces, r.cfg.ScanBlocks)
	if err != nil {
		return 0, fmt.Errorf("find the transactions at unknown nonces: %w", err)
	}
	recovered, missing := recoveredRows(signer, lease.Signer, nonces, found, r.clock.Now())
	recorded := 0
	if len(recovered) > 0 {
		if recorded, err = r.store.RecordRecovered(ctx, lease, recovered, r.clock.Now().Add(r.cfg.AdoptionWindow), r.cfg.ResubmitInterval); err != nil {
			return 0, r.leases.Fence(ctx, lease, err)
		}
		r.metrics.Recovered(ctx, "recorded", recorded)
		r.log.WithContext(ctx).Warnw("msg", "transactions the database lost recorded from the chain, unclaimed until a retried create adopts them",
			"signer", lease.Signer, "fencing_token", lease.Token, "recorded", recorded, "from_nonce", dbNext, "to_nonce", to-1)
	}
	switch {
	case len(missing) > 0:
		r.log.WithContext(ctx).Warnw("msg", "the chain does not show the transactions at some unknown nonces yet; the signer stays quarantined",
			"signer", lease.Signer, "missing", len(missing), "first_missing_nonce", missing[0], "scan_blocks", r.cfg.ScanBlocks)
		return recorded, nil
	case to < chainNonce:
		return recorded, nil // the next pass records the rest
	}
	note := fmt.Sprintf("nonces %d..%d recorded from the chain as unclaimed transactions", dbNext, chainNonce-1)
	released, err := r.store.FinishRecovery(ctx, lease, chainNonce, note)
	if err != nil {
		return recorded, r.leases.Fence(ctx, lease, err)
	}
	if released {
		r.log.WithContext(ctx).Warnw("msg", "signer serves again: every nonce the database lost has its transaction recorded", "signer", lease.Signer,
			"fencing_token", lease.Token, "db_next_nonce", dbNext, "chain_nonce", chainNonce, "mode", "adopt-by-intent")
	}
	return recorded, nil
}

// recoveredRows turns what the chain holds at the unknown nonces into rows, and lists the
// nonces it holds nothing the scan could see for. A row's intent is what the chain ran:
// recipient, value, data and gas; its fingerprint is that intent's, until an adopter gives
// it its own.
func recoveredRows(signer common.Address, signerHex string, nonces []uint64, found map[uint64]services.SentTx, now time.Time) ([]RecoveredTx, []uint64) {
	var rows []RecoveredTx
	var missing []uint64
	for _, nonce := range nonces {
		sent, ok := found[nonce]
		if !ok {
			missing = append(missing, nonce)
			continue
		}
		intent := domain.Intent{To: sent.To, Value: pipeline.OrZero(sent.Value), Data: sent.Data, GasLimit: sent.Gas}
		if sent.To != nil {
			intent.ToHex = sent.To.Hex()
		}
		id := uuid.Must(uuid.NewV7())
		tx := domain.ManagedTx{
			ID: id, Signer: signer, SignerHex: signerHex, Nonce: nonce, Intent: intent, EffectiveGasLimit: sent.Gas,
			Fingerprint: domain.CreateRequest{Signer: signer, Intent: intent}.Fingerprint(),
			State:       domain.StateTracking, TxHash: &sent.Hash, RecoveredAt: &now, CreatedAt: now, UpdatedAt: now,
		}
		attempt := pipeline.SignedAttempt{TxID: id, Hash: sent.Hash, Nonce: nonce, Kind: pipeline.AttemptOriginal,
			MaxFee: pipeline.OrZero(sent.MaxFee), MaxTip: pipeline.OrZero(sent.MaxTip), GasLimit: sent.Gas, Raw: sent.Raw}
		rows = append(rows, RecoveredTx{Tx: tx, Attempt: attempt})
	}
	slices.Sort(missing)
	return rows, missing
}

// ExpireUnclaimed ends the adoption window of the signer's recovered rows that no retried
// create adopted in time: they stay followed to finality, and their completions, held back
// for an adopter, reach the feed.
func (r *Reconciler) ExpireUnclaimed(ctx context.Context, lease domain.Lease) (int, error) {
	if !r.cfg.RecoverByIntent {
		return 0, nil
	}
	n, err := r.store.ExpireUnclaimed(ctx, lease)
	if err != nil {
		return 0, r.leases.Fence(ctx, lease, err)
	}
	if n > 0 {
		r.metrics.Recovered(ctx, "expired", n)
		r.log.WithContext(ctx).Warnw("msg", "recovered transactions no retried create adopted within the adoption window; their completions go to the feed",
			"signer", lease.Signer, "fencing_token", lease.Token, "count", n, "adoption_window", r.cfg.AdoptionWindow.String())
	}
	return n, nil
}
