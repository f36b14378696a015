package repositories_test

import (
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The funds check counts each transaction the balance has not paid for (those at and above
// the signer's nonce at the balance's block, whatever receipts are recorded) at the highest
// fee cap signed for it. The
// cap is kept on the row, with the attempt it was kept for, by the statements that store
// attempts (migration 0017) and read from the attempts where it is not known: rows signed
// before the migration, or signed or re-priced by a node of an earlier version during a
// rolling upgrade, whose statements change the current attempt without keeping the cap. At
// every step the count is what the attempts themselves say, and a cap that counts is the
// highest attempt's.
func TestUnminedCostCountsTheHighestCapSigned(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000c1"
	const fallbackFee, gasLimit = 100, 21000
	lease := acquireLease(t, pool, signer, "node-a")
	submitter := repositories.NewSubmittingRepository(pool, testChain())
	attempts := repositories.NewAttemptRepository(pool, testChain())
	funds := repositories.NewFundsRepository(pool, testChain())

	const rows = 6
	ids := make([]uuid.UUID, rows)
	for nonce := range ids {
		ids[nonce] = uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
			VALUES (1337, $1, $2, '\x00', $3, '{"to":"0x00000000000000000000000000000000000000ff","value":"1","gasLimit":21000}', 'ALLOCATED', $4)`,
			ids[nonce], signer, nonce, int64(lease.Token)); err != nil {
			t.Fatal(err)
		}
	}
	hashes := 0
	attempt := func(nonce int, kind pipeline.AttemptKind, fee int64) pipeline.SignedAttempt {
		hashes++
		// Hashes as a signer makes them: a key of 8 bytes tells them apart.
		return pipeline.SignedAttempt{TxID: ids[nonce], Hash: crypto.Keccak256Hash(big.NewInt(int64(hashes)).Bytes()), Nonce: uint64(nonce), Kind: kind,
			MaxFee: big.NewInt(fee), MaxTip: big.NewInt(1), GasLimit: gasLimit, Raw: []byte{byte(hashes)}}
	}
	currentHash := func(nonce int) common.Hash {
		t.Helper()
		var hash string
		if err := pool.QueryRow(ctx, "SELECT tx_hash FROM managed_tx WHERE tx_id = $1", ids[nonce]).Scan(&hash); err != nil {
			t.Fatal(err)
		}
		return common.HexToHash(hash)
	}
	// earlierVersion stores an attempt as the statements before migration 0017 did: the
	// current attempt changes, the cap on the row is not written.
	earlierVersion := func(nonce int, fee int64, signing bool) {
		t.Helper()
		a := attempt(nonce, pipeline.AttemptReplace, fee)
		update := `UPDATE managed_tx SET tx_hash = $2, sub_state = 'REPRICED', updated_at = now() WHERE tx_id = $1`
		if signing {
			update = `UPDATE managed_tx SET tx_hash = $2, state = 'TRACKING', sub_state = 'SIGNED', updated_at = now() WHERE tx_id = $1`
		}
		if _, err := pool.Exec(ctx, update, ids[nonce], a.Hash.Hex()); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
			VALUES (1337, $1, $2, $3, $4, 'REPLACE', $5, 1, 21000, '\x00', $6)`, a.Hash.Hex(), ids[nonce], signer, nonce, fee, int64(lease.Token)); err != nil {
			t.Fatal(err)
		}
	}
	// gasOf is the gas limit each row should be counted at, where a replacement raised it.
	gasOf := map[int]int64{}
	replaceWithGas := func(nonce int, fee, gas int64) {
		t.Helper()
		replaced := currentHash(nonce)
		a := attempt(nonce, pipeline.AttemptReplace, fee)
		a.GasLimit = uint64(gas)
		if updated, err := submitter.RecordReplacements(ctx, lease, []submitting.Replacement{{Replaced: replaced, Attempt: a}}); err != nil || len(updated) != 1 {
			t.Fatalf("RecordReplacements = %v, %v", updated, err)
		}
	}
	replace := func(nonce int, fee int64) { t.Helper(); replaceWithGas(nonce, fee, gasLimit) }

	// highest is the cap each row should be counted at: the highest attempt's, or the
	// fallback for one not signed.
	highest := map[int]int64{}
	// paidBelow is the signer's nonce at the block its balance was read at.
	paidBelow := 0
	steps := []struct {
		name string
		do   func()
		// capKnown says which rows keep their cap on the row after the step.
		capKnown map[int]bool
	}{
		{
			name:     "nothing signed: every row at the fallback fee",
			do:       func() {},
			capKnown: map[int]bool{},
		},
		{
			name: "rows 0-3 signed at 2",
			do: func() {
				var signed []pipeline.SignedAttempt
				for nonce := range 4 {
					signed = append(signed, attempt(nonce, pipeline.AttemptOriginal, 2))
					highest[nonce] = 2
				}
				if got, err := submitter.MarkSigned(ctx, lease, signed, time.Minute); err != nil || len(got) != 4 {
					t.Fatalf("MarkSigned = %v, %v", got, err)
				}
			},
			capKnown: map[int]bool{0: true, 1: true, 2: true, 3: true},
		},
		{
			name:     "row 0 re-priced at 5",
			do:       func() { replace(0, 5); highest[0] = 5 },
			capKnown: map[int]bool{0: true, 1: true, 2: true, 3: true},
		},
		{
			name:     "row 0 re-signed at 4 with its gas limit raised for the L1 part: counted at that limit and the highest cap",
			do:       func() { replaceWithGas(0, 4, 30_000); gasOf[0] = 30_000 },
			capKnown: map[int]bool{0: true, 1: true, 2: true, 3: true},
		},
		{
			name:     "row 0 re-priced at 6 back at the admitted limit: the raised limit still counts",
			do:       func() { replace(0, 6); highest[0] = 6 },
			capKnown: map[int]bool{0: true, 1: true, 2: true, 3: true},
		},
		{
			name: "row 1 cancelled at 7 (a single attempt)",
			do: func() {
				if ok, err := attempts.RecordAttempt(ctx, lease, attempt(1, pipeline.AttemptCancel, 7), domain.SubStateResolutionSubmitted(domain.ActionCancel), time.Minute); err != nil || !ok {
					t.Fatalf("RecordAttempt = %v, %v", ok, err)
				}
				highest[1] = 7
			},
			capKnown: map[int]bool{0: true, 1: true, 2: true, 3: true},
		},
		{
			name:     "row 2 re-priced at 9 by an earlier version: its cap no longer counts",
			do:       func() { earlierVersion(2, 9, false); highest[2] = 9 },
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
		{
			name:     "row 2 re-priced at 11 here: an unknown cap stays unknown",
			do:       func() { replace(2, 11); highest[2] = 11 },
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
		{
			name:     "row 4 signed at 3 by an earlier version",
			do:       func() { earlierVersion(4, 3, true); highest[4] = 3 },
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
		{
			name: "row 3 recorded mined at a block the balance was not read at: still counted",
			do: func() {
				if _, err := pool.Exec(ctx, "UPDATE managed_tx SET block_number = 7, receipt = '{}' WHERE tx_id = $1", ids[3]); err != nil {
					t.Fatal(err)
				}
			},
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
		{
			name:     "the balance's block holds nonces 0-1: paid for in it, no receipt recorded",
			do:       func() { paidBelow = 2 },
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
		{
			name:     "the balance's block holds nonces 0-3: row 3 paid for as well",
			do:       func() { paidBelow = 4 },
			capKnown: map[int]bool{0: true, 1: true, 3: true},
		},
	}
	for _, step := range steps {
		step.do()
		want := big.NewInt(0)
		for nonce := paidBelow; nonce < rows; nonce++ {
			fee, signed := highest[nonce]
			if !signed {
				fee = fallbackFee
			}
			gas, raised := gasOf[nonce]
			if !raised {
				gas = gasLimit
			}
			want.Add(want, big.NewInt(1+gas*fee))
		}
		got, err := funds.UnminedCost(ctx, signer, uint64(paidBelow), big.NewInt(fallbackFee))
		if err != nil {
			t.Fatal(err)
		}
		if got.Cmp(want) != 0 {
			t.Errorf("%s: unmined cost %s, want %s", step.name, got, want)
		}
		checkFeeCaps(t, pool, ids, highest, step.capKnown, step.name)
	}
}

// checkFeeCaps checks the cap that counts on each row (kept with its current attempt): the
// highest attempt's where known, none elsewhere.
func checkFeeCaps(t *testing.T, pool *pgxpool.Pool, ids []uuid.UUID, highest map[int]int64, known map[int]bool, step string) {
	t.Helper()
	for nonce, id := range ids {
		var kept *int64
		if err := pool.QueryRow(t.Context(), `SELECT (CASE WHEN max_fee_for_hash = tx_hash_key(tx_hash) THEN max_fee_signed END)::bigint FROM managed_tx WHERE tx_id = $1`, id).Scan(&kept); err != nil {
			t.Fatal(err)
		}
		switch {
		case known[nonce] && (kept == nil || *kept != highest[nonce]):
			t.Errorf("%s: row %d keeps cap %v, want %d", step, nonce, kept, highest[nonce])
		case !known[nonce] && kept != nil:
			t.Errorf("%s: row %d keeps cap %d, want none (not known)", step, nonce, *kept)
		}
	}
}
