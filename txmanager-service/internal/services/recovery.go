package services

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// RecoveryConfig is how the pipeline reconciles the database with a chain that is ahead of
// it (a failover to a standby that missed commits).
type RecoveryConfig struct {
	// AdoptUnknownChainNonces: a key also used outside the service; allocation goes on above
	// nonces the database does not know instead of quarantining the signer.
	AdoptUnknownChainNonces bool
	// ScanBlocks bounds how far back a taken nonce's transaction is looked for.
	ScanBlocks uint64
}

// ChainCheckStore is what the recovery checks read and write.
type ChainCheckStore interface {
	// SignerChainCheck returns the signer's next nonce on record (-1: none) and whether it
	// is quarantined.
	SignerChainCheck(ctx context.Context, signer string) (int64, bool, error)
	// Quarantine records a quarantine (fenced); false when an operator already released
	// those nonces.
	Quarantine(ctx context.Context, lease domain.Lease, dbNext, chainNext uint64) (bool, error)
	// ListNonceTaken returns the signer's transactions whose nonce went to a transaction
	// without an attempt on record.
	ListNonceTaken(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	// FailNonceTaken makes one of them final as FAILED_FINAL (fenced, with its completion).
	FailNonceTaken(ctx context.Context, lease domain.Lease, tx domain.ManagedTx, reason string) error
}

// quarantineGauge remembers which held signers the latest checks found quarantined.
type quarantineGauge struct {
	mu      sync.Mutex
	signers map[string]bool
}

func (g *quarantineGauge) set(signer string, quarantined bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.signers[signer] = quarantined
}

func registerQuarantineGauge(metrics *telemetry.Metrics, g *quarantineGauge) error {
	return metrics.RegisterGauge(telemetry.SignerQuarantined, "1 for a signer this node holds that is quarantined (the chain holds nonces the database does not know).",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			g.mu.Lock()
			defer g.mu.Unlock()
			for signer, q := range g.signers {
				v := int64(0)
				if q {
					v = 1
				}
				record(v, attribute.String("signer", signer))
			}
		})
}

// CheckChainAhead quarantines the signer when the chain's pending nonce is above every
// nonce the database knows for it: the chain then holds transactions the database lost or
// never had. Allocation refuses the signer until an operator releases it (admin API),
// unless the configuration adopts such nonces.
func (p *Pipeline) CheckChainAhead(ctx context.Context, lease domain.Lease) error {
	if p.cfg.Recovery.AdoptUnknownChainNonces {
		return nil
	}
	// The chain first, the cursor second: every transaction of ours the chain can hold was
	// allocated (the cursor moved past it) before it was sent, so a chain nonce read before
	// the cursor is above it only when the chain holds nonces the database does not know.
	pending, err := p.chain.PendingNonceAt(ctx, common.HexToAddress(lease.Signer))
	if err != nil {
		return err
	}
	next, quarantined, err := p.checks.SignerChainCheck(ctx, lease.Signer)
	if err != nil {
		return err
	}
	p.quarantine.set(lease.Signer, quarantined)
	if quarantined || next < 0 || pending <= uint64(next) {
		return nil
	}
	recorded, err := p.checks.Quarantine(ctx, lease, uint64(next), pending)
	if err != nil {
		return p.fenced(ctx, lease, err)
	}
	if !recorded {
		return nil // released by an operator; the next allocation goes on above them
	}
	p.quarantine.set(lease.Signer, true)
	p.metrics.Quarantined(ctx)
	p.log.WithContext(ctx).Errorw("msg", "signer quarantined: the chain holds nonces the database does not know", "signer", lease.Signer,
		"fencing_token", lease.Token, "db_next_nonce", next, "chain_nonce", pending)
	return nil
}

// SettleTakenNonces identifies the transactions that hold the nonces of the signer's
// NONCE_TAKEN rows. One carrying the row's own intent is this service's (its attempt was
// lost with the database's last commits): it is recorded as the row's attempt and followed
// to finality. Another, mined and confirmed, took the nonce for good: the row becomes
// FAILED_FINAL. Anything else (not found yet, not confirmed) is looked at again later.
func (p *Pipeline) SettleTakenNonces(ctx context.Context, lease domain.Lease) (int, error) {
	rows, err := p.checks.ListNonceTaken(ctx, lease.Signer, 64)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	nonces := make([]uint64, len(rows))
	for i, r := range rows {
		nonces[i] = r.Nonce
	}
	found, err := p.chain.SentTransactions(ctx, common.HexToAddress(lease.Signer), nonces, p.cfg.Recovery.ScanBlocks)
	if err != nil {
		return 0, fmt.Errorf("find the transactions at taken nonces: %w", err)
	}
	head, err := p.chain.LatestHeader(ctx)
	if err != nil {
		return 0, err
	}
	settled := 0
	var errs []error
	for _, row := range rows {
		sent, ok := found[row.Nonce]
		switch {
		case !ok:
			continue
		case sameIntent(row.Intent, sent):
			attempt := SignedAttempt{TxID: row.ID, Hash: sent.Hash, Nonce: row.Nonce, Kind: AttemptOriginal,
				MaxFee: nonNil(sent.MaxFee), MaxTip: nonNil(sent.MaxTip), GasLimit: sent.Gas, Raw: sent.Raw}
			if err := p.store.RecordAttempt(ctx, lease, attempt, SubStateRecognised, p.cfg.ResubmitInterval); err != nil {
				errs = append(errs, p.fenced(ctx, lease, err))
				continue
			}
			p.metrics.NonceTakenResolved(ctx, "ours")
			p.log.WithContext(ctx).Warnw("msg", "nonce taken by this service's own transaction, whose attempt the database had lost: following it",
				"signer", lease.Signer, "tx_id", row.ID.String(), "nonce", row.Nonce, "tx_hash", sent.Hash.Hex(), "fencing_token", lease.Token)
		case sent.BlockNumber > 0 && head.Number+1 >= sent.BlockNumber+max(p.cfg.Confirmations, 1):
			reason := fmt.Sprintf("nonce %d was taken by transaction %s (another intent), mined in block %d", row.Nonce, sent.Hash.Hex(), sent.BlockNumber)
			if err := p.checks.FailNonceTaken(ctx, lease, row, reason); err != nil {
				errs = append(errs, p.fenced(ctx, lease, err))
				continue
			}
			p.metrics.NonceTakenResolved(ctx, "foreign")
			p.log.WithContext(ctx).Warnw("msg", "nonce taken by another transaction; final as FAILED_FINAL", "signer", lease.Signer,
				"tx_id", row.ID.String(), "nonce", row.Nonce, "tx_hash", sent.Hash.Hex(), "fencing_token", lease.Token, "state", string(domain.StateFailedFinal))
		default:
			continue
		}
		settled++
	}
	return settled, errors.Join(errs...)
}

// sameIntent: the chain's transaction carries exactly the intent (recipient, value, data).
func sameIntent(intent domain.Intent, sent SentTx) bool {
	switch {
	case (intent.To == nil) != (sent.To == nil):
		return false
	case intent.To != nil && *intent.To != *sent.To:
		return false
	}
	return nonNil(intent.Value).Cmp(nonNil(sent.Value)) == 0 && bytes.Equal(intent.Data, sent.Data)
}
