package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// signerResult is one row of the summary.
type signerResult struct {
	created, confirmed int
	// chainNonce is eth_getTransactionCount(signer, "latest"): transactions mined from it.
	chainNonce uint64
	// nonces are the nonces the service reported, compared with 0..perSigner-1.
	nonces e2e.NonceReport
	// onChain counts transactions the node holds as the service described them.
	onChain     int
	completions int
	// broadcasts sums submitAttempts: above created means the service rebroadcast, which
	// on a healthy devnet it should not need to.
	broadcasts int
}

// verification is everything checked after the last transaction was CONFIRMED.
type verification struct {
	// lanes are the rows: one per chain and signer (laneOf).
	lanes       []signerResult
	completions int
	problems    []error
}

func (v *verification) problem(format string, args ...any) {
	v.problems = append(v.problems, fmt.Errorf(format, args...))
}

// err is nil when nothing disagreed, else the first few problems and how many there were.
func (v *verification) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	const show = 10
	shown := v.problems[:min(show, len(v.problems))]
	var more string
	if len(v.problems) > show {
		more = fmt.Sprintf(" (first %d shown)", show)
	}
	return fmt.Errorf("%d check(s) failed%s:\n%w", len(v.problems), more, errors.Join(shown...))
}

// verify compares the service's account of the run with each chain and with the
// completion feed: per chain and signer, nonces 0..perSigner-1, and every transaction
// mined on the chain it was asked for (read back from that chain, signed for its id). It
// returns an error only when it could not check; disagreements are problems.
func verify(ctx context.Context, chains []*runChain, client *e2e.Client, signers []common.Address, txs []*createdTx, perSigner uint64, parallel int) (*verification, error) {
	lanes := len(chains) * len(signers)
	v := &verification{lanes: make([]signerResult, lanes)}
	nonces := make([][]uint64, lanes)
	expected := make([][]e2e.ExpectedTx, len(chains))
	owners := make([][]*createdTx, len(chains))
	chainIndex := make(map[uint64]int, len(chains))
	for i, c := range chains {
		chainIndex[c.id] = i
	}
	for _, tx := range txs {
		row := &v.lanes[tx.lane]
		row.created++
		last := tx.last
		if last.GetState() == stateConfirmed {
			row.confirmed++
		}
		row.broadcasts += int(last.GetSubmitAttempts())
		if last.GetNonce() != tx.nonce {
			v.problem("tx %s: create allocated nonce %d, now reads %d", tx.txID, tx.nonce, last.GetNonce())
		}
		nonces[tx.lane] = append(nonces[tx.lane], last.GetNonce())
		if last.GetChainId() != tx.chainID {
			v.problem("tx %s: asked for chain %d, reads chain %d", tx.txID, tx.chainID, last.GetChainId())
		}
		receipt := last.GetReceipt()
		if receipt == nil {
			v.problem("tx %s: CONFIRMED without a receipt", tx.txID)
			continue
		}
		if !strings.EqualFold(receipt.GetTxHash(), last.GetTxHash()) {
			v.problem("tx %s: txHash %s but the receipt is for %s", tx.txID, last.GetTxHash(), receipt.GetTxHash())
		}
		c := chainIndex[tx.chainID]
		expected[c] = append(expected[c], e2e.ExpectedTx{
			TxID: tx.txID, Signer: tx.signer, Nonce: last.GetNonce(),
			TxHash: common.HexToHash(receipt.GetTxHash()), BlockNumber: receipt.GetBlockNumber(),
		})
		owners[c] = append(owners[c], tx)
	}

	for c, ch := range chains {
		for s, signer := range signers {
			lane := laneOf(c, s, len(signers))
			row := &v.lanes[lane]
			count, err := ch.eth.NonceAt(ctx, signer, nil)
			if err != nil {
				return v, fmt.Errorf("chain %d: eth_getTransactionCount %s: %w", ch.id, signer, err)
			}
			row.chainNonce = count
			if count != perSigner {
				v.problem("chain %d signer %s: %d transactions mined, want %d", ch.id, signer, count, perSigner)
			}
			row.nonces = e2e.CheckNonces(nonces[lane], perSigner)
			if !row.nonces.OK() {
				v.problem("chain %d signer %s: nonces %s", ch.id, signer, row.nonces)
			}
		}
		// Read back from the chain each was asked for: CheckOnChain recovers the sender with
		// that chain's id, so a transaction signed for another chain fails here.
		results, err := e2e.CheckOnChain(ctx, ch.eth, expected[c], parallel)
		if err != nil {
			return v, err
		}
		for i, result := range results {
			if result != nil {
				v.problem("chain %d: %w", ch.id, result)
				continue
			}
			v.lanes[owners[c][i].lane].onChain++
		}
	}

	return v, checkCompletions(ctx, client, txs, v)
}

// checkCompletions pages through the whole feed: each transaction of the run exactly once,
// CONFIRMED, with the nonce and hash the transaction itself reports.
func checkCompletions(ctx context.Context, client *e2e.Client, txs []*createdTx, v *verification) error {
	completions, err := client.ReadCompletions(ctx, 100, len(txs), time.Minute)
	if err != nil {
		return fmt.Errorf("completion feed: %w", err)
	}
	v.completions = len(completions)
	byID := make(map[string]*createdTx, len(txs))
	for _, tx := range txs {
		byID[tx.txID] = tx
	}
	seen := make(map[string]int, len(completions))
	for _, c := range completions {
		seen[c.GetTxId()]++
		tx, ok := byID[c.GetTxId()]
		switch {
		case !ok:
			v.problem("completion for unknown tx %s", c.GetTxId())
			continue
		case seen[c.GetTxId()] > 1:
			v.problem("completion for tx %s listed %d times", c.GetTxId(), seen[c.GetTxId()])
			continue
		}
		v.lanes[tx.lane].completions++
		if c.GetChainId() != tx.chainID {
			v.problem("completion for tx %s: chain %d, asked for chain %d", c.GetTxId(), c.GetChainId(), tx.chainID)
		}
		if c.GetStatus() != stateConfirmed || c.GetNonce() != tx.nonce || !strings.EqualFold(c.GetTxHash(), tx.last.GetTxHash()) ||
			c.GetBlockNumber() != tx.last.GetReceipt().GetBlockNumber() ||
			!common.IsHexAddress(c.GetSigner()) || common.HexToAddress(c.GetSigner()) != tx.signer {
			v.problem("completion for tx %s: %s signer %s nonce %d hash %s block %d; the tx reads %s signer %s nonce %d hash %s block %d",
				c.GetTxId(), c.GetStatus(), c.GetSigner(), c.GetNonce(), c.GetTxHash(), c.GetBlockNumber(),
				tx.last.GetState(), tx.signer, tx.nonce, tx.last.GetTxHash(), tx.last.GetReceipt().GetBlockNumber())
		}
	}
	for _, tx := range txs {
		if seen[tx.txID] == 0 {
			v.problem("tx %s (%s) is missing from the completion feed", tx.txID, tx.requestID)
		}
	}
	return nil
}
