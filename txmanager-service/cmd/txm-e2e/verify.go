package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"

	"github.com/bionicotaku/txmanager-service/internal/e2e"
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
	perSigner   []signerResult
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

// verify compares the service's account of the run with the chain and with the completion
// feed. It returns an error only when it could not check; disagreements are problems.
func verify(ctx context.Context, eth *ethclient.Client, client *e2e.Client, signers []common.Address, txs []*createdTx, perSigner uint64, parallel int) (*verification, error) {
	v := &verification{perSigner: make([]signerResult, len(signers))}
	nonces := make([][]uint64, len(signers))
	expected := make([]e2e.ExpectedTx, 0, len(txs))
	owners := make([]*createdTx, 0, len(txs))
	for _, tx := range txs {
		row := &v.perSigner[tx.signerIndex]
		row.created++
		last := tx.last
		if last.GetState() == stateConfirmed {
			row.confirmed++
		}
		row.broadcasts += int(last.GetSubmitAttempts())
		if last.GetNonce() != tx.nonce {
			v.problem("tx %s: create allocated nonce %d, now reads %d", tx.txID, tx.nonce, last.GetNonce())
		}
		nonces[tx.signerIndex] = append(nonces[tx.signerIndex], last.GetNonce())
		receipt := last.GetReceipt()
		if receipt == nil {
			v.problem("tx %s: CONFIRMED without a receipt", tx.txID)
			continue
		}
		if !strings.EqualFold(receipt.GetTxHash(), last.GetTxHash()) {
			v.problem("tx %s: txHash %s but the receipt is for %s", tx.txID, last.GetTxHash(), receipt.GetTxHash())
		}
		expected = append(expected, e2e.ExpectedTx{
			TxID: tx.txID, Signer: tx.signer, Nonce: last.GetNonce(),
			TxHash: common.HexToHash(receipt.GetTxHash()), BlockNumber: receipt.GetBlockNumber(),
		})
		owners = append(owners, tx)
	}

	for i, signer := range signers {
		row := &v.perSigner[i]
		count, err := eth.NonceAt(ctx, signer, nil)
		if err != nil {
			return v, fmt.Errorf("eth_getTransactionCount %s: %w", signer, err)
		}
		row.chainNonce = count
		if count != perSigner {
			v.problem("signer %s: %d transactions mined, want %d", signer, count, perSigner)
		}
		row.nonces = e2e.CheckNonces(nonces[i], perSigner)
		if !row.nonces.OK() {
			v.problem("signer %s: nonces %s", signer, row.nonces)
		}
	}

	results, err := e2e.CheckOnChain(ctx, eth, expected, parallel)
	if err != nil {
		return v, err
	}
	for i, result := range results {
		if result != nil {
			v.problem("%w", result)
			continue
		}
		v.perSigner[owners[i].signerIndex].onChain++
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
		v.perSigner[tx.signerIndex].completions++
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
