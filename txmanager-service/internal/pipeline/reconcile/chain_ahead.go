package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// CheckChainAhead quarantines the signer when the chain's pending nonce is above every
// nonce the database knows for it: the chain then holds transactions the database lost or
// never had. Allocation refuses the signer until RecoverFromChain has recorded the unknown
// transactions and released it (by itself in adopt-by-intent mode, at an operator's request
// in hold mode). With nonce
// unknownChainNonces adopt nothing is checked. It returns what it read, the quarantine it
// recorded included.
func (r *Reconciler) CheckChainAhead(ctx context.Context, lease domain.Lease) (SignerCheck, error) {
	if r.cfg.AdoptUnknownChainNonces {
		return SignerCheck{NextNonce: -1}, nil
	}
	// The chain first, the cursor second: every transaction of ours the chain can hold was
	// allocated (the cursor moved past it) before it was sent, so a chain nonce read before
	// the cursor is above it only when the chain holds nonces the database does not know.
	pending, err := services.HighestPendingNonce(ctx, r.chain, common.HexToAddress(lease.Signer))
	if err != nil {
		return SignerCheck{}, err
	}
	check, err := r.store.SignerChainCheck(ctx, lease.Signer)
	if err != nil {
		return SignerCheck{}, err
	}
	if check.Quarantine != nil || check.NextNonce < 0 || pending <= uint64(check.NextNonce) {
		return check, nil
	}
	next := uint64(check.NextNonce)
	recorded, err := r.store.Quarantine(ctx, lease, next, pending)
	if err != nil {
		return check, r.leases.Fence(ctx, lease, err)
	}
	if !recorded {
		return check, nil // released by an operator; the next allocation goes on above them
	}
	check.Quarantine = &Recovery{NonceRange: NonceRange{From: next, To: pending}, RecoveryProgress: RecoveryProgress{RecordedTo: next}, DetectedAt: r.clock.Now()}
	r.metrics.Quarantined(ctx)
	r.log.WithContext(ctx).Errorw("msg", "signer quarantined: the chain holds nonces the database does not know", "signer", lease.Signer,
		"fencing_token", lease.Token, "db_next_nonce", next, "chain_nonce", pending)
	services.RecordEvent(ctx, r.store, r.log, services.SignerEvent(domain.EventQuarantined, 0, common.HexToAddress(lease.Signer),
		map[string]any{"signer": lease.Signer, "dbNextNonce": next, "chainNonce": pending}))
	return check, nil
}

// takenNonceVerdict is what the chain says of a NONCE_TAKEN row's nonce.
type takenNonceVerdict int

const (
	// verdictWait: nothing found yet, or another transaction not yet confirmed: look again.
	verdictWait takenNonceVerdict = iota
	// verdictOurs: the transaction there carries the row's own intent.
	verdictOurs
	// verdictForeign: another intent, mined with enough confirmations: the nonce is gone.
	verdictForeign
)

// judgeTakenNonce decides about one row from what the chain holds at its nonce (found is
// false when nothing was found) and the head.
func judgeTakenNonce(row domain.ManagedTx, sent services.SentTx, found bool, head, confirmations uint64) takenNonceVerdict {
	switch {
	case !found:
		return verdictWait
	case sameIntent(row.Intent, sent):
		return verdictOurs
	case sent.BlockNumber > 0 && head+1 >= sent.BlockNumber+max(confirmations, 1):
		return verdictForeign
	default:
		return verdictWait
	}
}

// SettleTakenNonces identifies the transactions that hold the nonces of the signer's
// NONCE_TAKEN rows. One carrying the row's own intent is this service's (its attempt was
// lost with the database's last commits): it is recorded as the row's attempt and followed
// to finality. Another, mined and confirmed, took the nonce for good: the row becomes
// FAILED_FINAL. Anything else (not found yet, not confirmed) is looked at again later.
func (r *Reconciler) SettleTakenNonces(ctx context.Context, lease domain.Lease) (int, error) {
	rows, err := r.store.ListNonceTaken(ctx, lease.Signer, 64)
	if err != nil || len(rows) == 0 {
		if err == nil {
			r.belowWindow.forget(common.HexToAddress(lease.Signer))
		}
		return 0, err
	}
	nonces := make([]uint64, len(rows))
	for i, row := range rows {
		nonces[i] = row.Nonce
	}
	signer := common.HexToAddress(lease.Signer)
	found, err := r.chain.SentTransactions(ctx, signer, nonces, r.cfg.ScanBlocks)
	if err != nil {
		return 0, fmt.Errorf("find the transactions at taken nonces: %w", err)
	}
	head, err := r.chain.LatestHeader(ctx)
	if err != nil {
		return 0, err
	}
	r.findMinedLongAgo(ctx, lease, rows, found, head.Number)
	// A foreign transaction is final for the row as receipts are: on a chain that follows the
	// node's finalized block, once that block has reached it, not at a count of confirmations
	// (which such chains leave at 0: one block, and a one-block reorg would undo it).
	judgeAt, confirmations := head.Number, r.cfg.Confirmations
	if r.cfg.UseFinalizedTag {
		finalized, err := r.chain.FinalizedHeader(ctx)
		if err != nil {
			return 0, fmt.Errorf("finalized block: %w", err)
		}
		judgeAt, confirmations = finalized.Number, 1
	}
	verdicts := make([]takenNonceVerdict, len(rows))
	for i, row := range rows {
		sent, ok := found[row.Nonce]
		verdicts[i] = judgeTakenNonce(row, sent, ok, judgeAt, confirmations)
	}
	// Rows of their own intent need no header: when the headers cannot be read they are
	// still followed, and the others wait for the next pass.
	canonical, headersErr := r.stillCanonical(ctx, rows, found, verdicts)
	settled := 0
	var errs []error
	if headersErr != nil {
		errs = append(errs, headersErr)
	}
	for i, row := range rows {
		sent, verdict := found[row.Nonce], verdicts[i]
		if verdict == verdictForeign && !canonical[sent.BlockHash] {
			// Counted deep enough, but in a block the chain no longer holds at its height (a
			// reorganisation since, or an endpoint on another branch): what holds the nonce
			// now is read again on the next pass, and may be this row's own intent.
			if headersErr == nil {
				r.belowWindow.forgetFinding(signer, row.Nonce, sent.Hash)
				r.log.WithContext(ctx).Infow("msg", "the block of the transaction at a taken nonce is no longer the chain's; looking again",
					"signer", lease.Signer, "tx_id", row.ID.String(), "nonce", row.Nonce, "tx_hash", sent.Hash.Hex(), "block", sent.BlockNumber)
			}
			continue
		}
		switch verdict {
		case verdictOurs:
			attempt := pipeline.SignedAttempt{TxID: row.ID, Hash: sent.Hash, Nonce: row.Nonce, Kind: pipeline.AttemptOriginal,
				MaxFee: pipeline.OrZero(sent.MaxFee), MaxTip: pipeline.OrZero(sent.MaxTip), GasLimit: sent.Gas, Raw: sent.Raw}
			recorded, err := r.attempts.RecordAttempt(ctx, lease, attempt, domain.SubStateRecognised, r.cfg.ResubmitInterval)
			if err != nil {
				errs = append(errs, r.leases.Fence(ctx, lease, err))
				continue
			}
			if !recorded {
				continue // the row moved on meanwhile (mined or final): nothing to follow
			}
			r.metrics.NonceTakenResolved(ctx, "ours")
			r.log.WithContext(ctx).Warnw("msg", "nonce taken by this service's own transaction, whose attempt the database had lost: following it",
				"signer", lease.Signer, "tx_id", row.ID.String(), "nonce", row.Nonce, "tx_hash", sent.Hash.Hex(), "fencing_token", lease.Token)
		case verdictForeign:
			reason := fmt.Sprintf("nonce %d was taken by transaction %s (another intent), mined in block %d", row.Nonce, sent.Hash.Hex(), sent.BlockNumber)
			if err := r.store.FailNonceTaken(ctx, lease, row, reason); err != nil {
				errs = append(errs, r.leases.Fence(ctx, lease, err))
				continue
			}
			r.metrics.NonceTakenResolved(ctx, "foreign")
			r.log.WithContext(ctx).Warnw("msg", "nonce taken by another transaction; final as FAILED_FINAL", "signer", lease.Signer,
				"tx_id", row.ID.String(), "nonce", row.Nonce, "tx_hash", sent.Hash.Hex(), "fencing_token", lease.Token, "state", string(domain.StateFailedFinal))
		default:
			continue
		}
		settled++
	}
	return settled, errors.Join(errs...)
}

// stillCanonical reads the chain's headers at the heights of the blocks that would make a
// row FAILED_FINAL and answers which of those blocks are still the chain's (none, with the
// error, when the headers cannot be read). A row is final
// for good, so its evidence is held to what the receipts stage asks of a receipt: the block
// it was found in is the one the chain has at that height now, not only deep enough by
// count.
func (r *Reconciler) stillCanonical(ctx context.Context, rows []domain.ManagedTx, found map[uint64]services.SentTx, verdicts []takenNonceVerdict) (map[common.Hash]bool, error) {
	var heights []uint64
	for i, row := range rows {
		if block := found[row.Nonce].BlockNumber; verdicts[i] == verdictForeign && !slices.Contains(heights, block) {
			heights = append(heights, block)
		}
	}
	canonical := make(map[common.Hash]bool, len(heights))
	if len(heights) == 0 {
		return canonical, nil
	}
	headers, err := r.chain.HeadersByNumber(ctx, heights)
	if err != nil {
		return canonical, fmt.Errorf("headers of the blocks holding taken nonces: %w", err)
	}
	for _, h := range headers {
		if h != nil {
			canonical[h.Hash] = true
		}
	}
	return canonical, nil
}

// sameIntent: the chain's transaction carries exactly the intent (recipient, value, data).
func sameIntent(intent domain.Intent, sent services.SentTx) bool {
	switch {
	case (intent.To == nil) != (sent.To == nil):
		return false
	case intent.To != nil && *intent.To != *sent.To:
		return false
	}
	return pipeline.OrZero(intent.Value).Cmp(pipeline.OrZero(sent.Value)) == 0 && bytes.Equal(intent.Data, sent.Data)
}

// maxDeepLookupsPerPass bounds the taken nonces searched for below the scan window in one
// pass: each is a binary search over the chain's history (a few dozen calls).
const maxDeepLookupsPerPass = 4

// findMinedLongAgo adds to found the transactions of rows' nonces mined before the window
// SentTransactions reads: a database restored from an older backup can hold rows whose
// nonces the chain used hours ago. Each is located by the signer's nonce at past blocks and
// read from its block. A node that keeps no old state cannot say; the chain's blocks are
// read instead, a step a pass (findBelowWindow).
func (r *Reconciler) findMinedLongAgo(ctx context.Context, lease domain.Lease, rows []domain.ManagedTx, found map[uint64]services.SentTx, head uint64) {
	signer := common.HexToAddress(lease.Signer)
	var missing []uint64
	for _, row := range rows {
		if _, ok := found[row.Nonce]; !ok {
			missing = append(missing, row.Nonce)
		}
	}
	if len(missing) == 0 {
		r.belowWindow.forget(signer)
		return
	}
	mined, err := r.chain.NonceAtBlock(ctx, signer, head)
	if err != nil {
		return
	}
	// A nonce not mined yet is found in the window once it is.
	missing = slices.DeleteFunc(missing, func(nonce uint64) bool { return nonce >= mined })
	if len(missing) == 0 {
		r.belowWindow.forget(signer)
		return
	}
	for _, nonce := range missing[:min(len(missing), maxDeepLookupsPerPass)] {
		block, ok := r.blockOfNonce(ctx, signer, nonce, head)
		if !ok {
			r.findBelowWindow(ctx, signer, lease.Token, missing, found, head)
			return
		}
		scan, err := r.chain.ScanSent(ctx, signer, block, 1, nonce, 1)
		if err != nil {
			return
		}
		for _, tx := range scan.Txs {
			if tx.Nonce == nonce {
				found[nonce] = tx
			}
		}
	}
}
