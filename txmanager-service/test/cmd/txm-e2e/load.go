package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"golang.org/x/sync/errgroup"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// createdTx is one transaction of the run: what was asked, what create answered, and the
// last state read back.
type createdTx struct {
	// lane is the row of the summary: one per chain and signer (laneOf).
	lane      int
	chainID   uint64
	signer    common.Address
	requestID string
	txID      string
	// nonce is what create allocated; the final read and the chain must agree with it.
	nonce uint64
	// attempts is how many create calls it took (more than one after a retryable answer).
	attempts int
	last     *v1.Tx
}

// createAttempts bounds retries of one create: requestId makes a retry safe, since a
// create whose answer was lost comes back as a replay of the same transaction.
const createAttempts = 5

// createAll sends perSigner transfers for each signer on each chain, parallel at a time,
// round-robin over the signers and chains so that every allocation is contended at once.
// Both chains get the same request ids: an idempotency key belongs to one chain's signer.
func createAll(ctx context.Context, client *e2e.Client, chains []uint64, signers []common.Address, perSigner, parallel int) ([]*createdTx, error) {
	txs := make([]*createdTx, 0, len(chains)*len(signers)*perSigner)
	for i := range perSigner {
		for s, signer := range signers {
			for c, chainID := range chains {
				txs = append(txs, &createdTx{lane: laneOf(c, s, len(signers)), chainID: chainID, signer: signer, requestID: fmt.Sprintf("e2e-%d-%d", s, i)})
			}
		}
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, tx := range txs {
		g.Go(func() error { return create(ctx, client, tx) })
	}
	return txs, g.Wait()
}

// laneOf is the summary row of signer s on chain c.
func laneOf(c, s, signers int) int { return c*signers + s }

func create(ctx context.Context, client *e2e.Client, tx *createdTx) error {
	req := &v1.CreateTxRequest{
		ChainId:   tx.chainID,
		Signer:    tx.signer.Hex(),
		RequestId: tx.requestID,
		To:        e2e.Recipient().Hex(),
		Value:     "1000",
		GasLimit:  21000,
	}
	for {
		tx.attempts++
		resp, err := client.CreateTx(ctx, req)
		if err == nil {
			// A replay is only expected for a retry whose first answer never arrived.
			if !resp.GetCreated() && tx.attempts == 1 {
				return fmt.Errorf("create %s: first request answered as a replay (HTTP 200) of tx %s", tx.requestID, resp.GetTx().GetTxId())
			}
			got := resp.GetTx()
			if got.GetChainId() != tx.chainID {
				return fmt.Errorf("create %s: answered for chain %d, asked for chain %d", tx.requestID, got.GetChainId(), tx.chainID)
			}
			if !common.IsHexAddress(got.GetSigner()) || common.HexToAddress(got.GetSigner()) != tx.signer {
				return fmt.Errorf("create %s: answered signer %q, asked for %s", tx.requestID, got.GetSigner(), tx.signer)
			}
			tx.txID, tx.nonce, tx.last = got.GetTxId(), got.GetNonce(), got
			return nil
		}
		var apiErr *e2e.APIError
		retryable := !errors.As(err, &apiErr) || apiErr.Retryable()
		if !retryable || tx.attempts >= createAttempts || ctx.Err() != nil {
			return fmt.Errorf("create %s (attempt %d): %w", tx.requestID, tx.attempts, err)
		}
		wait := time.Duration(tx.attempts) * 200 * time.Millisecond
		if apiErr != nil && apiErr.RetryAfter > 0 {
			wait = apiErr.RetryAfter
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("create %s: %w (last error: %w)", tx.requestID, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}
