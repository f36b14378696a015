package main

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// The invariants the checkers count, as pure functions over what the database, the chain
// and the load recorded: reading is apart from counting, so every count has a table test
// over rows made to break it.

// managedTx is one managed transaction as the checker reads it from the database.
type managedTx struct {
	id     string
	signer string // as stored: the address's Hex form
	nonce  uint64
	state  domain.State
	// createdAt is the allocation batch's time: rows of one batch tie.
	createdAt time.Time
	txHash    string // "" when none is recorded
	block     uint64
	// completions counts the completion rows written for it on its chain.
	completions int
	// heldForAdopter: recovered from the chain and not yet adopted, so its completion waits
	// for the create that adopts it (or the end of the adoption window).
	heldForAdopter bool
}

// attempt is one signed attempt: the transaction it is for and the nonce it used.
type attempt struct {
	txID   string
	signer string
	nonce  uint64
}

// chainRecords is what the database holds of one chain.
type chainRecords struct {
	txs      []managedTx
	attempts []attempt
}

// lostAcknowledged is the acknowledged tx ids the database does not hold, in acked's order.
func lostAcknowledged(acked []string, txs []managedTx) []string {
	held := make(map[string]bool, len(txs))
	for _, tx := range txs {
		held[strings.ToLower(tx.id)] = true
	}
	var lost []string
	for _, id := range acked {
		if !held[strings.ToLower(id)] {
			lost = append(lost, id)
		}
	}
	return lost
}

// noncesBySigner is each signer's nonces, in the rows' order.
func noncesBySigner(txs []managedTx) map[string][]uint64 {
	out := map[string][]uint64{}
	for _, tx := range txs {
		out[tx.signer] = append(out[tx.signer], tx.nonce)
	}
	return out
}

// duplicateNonces counts the (signer, nonce) pairs more than one transaction holds.
func duplicateNonces(txs []managedTx) int {
	n := 0
	for _, nonces := range noncesBySigner(txs) {
		n += len(e2e.CheckNonces(nonces, slices.Max(nonces)+1).Duplicates)
	}
	return n
}

// signersWithGaps counts the signers whose nonces do not cover 0 up to their highest: a
// missing nonce stalls every later transaction of the signer.
func signersWithGaps(txs []managedTx) int {
	n := 0
	for _, nonces := range noncesBySigner(txs) {
		if len(e2e.CheckNonces(nonces, slices.Max(nonces)+1).Missing) > 0 {
			n++
		}
	}
	return n
}

// nonceRegressions counts the transactions allocated after another of their signer yet
// given a lower nonce: allocation order never goes backwards. Rows are taken in allocation
// order (batch time, then nonce, since a batch's rows tie on time).
func nonceRegressions(txs []managedTx) int {
	bySigner := map[string][]managedTx{}
	for _, tx := range txs {
		bySigner[tx.signer] = append(bySigner[tx.signer], tx)
	}
	n := 0
	for _, rows := range bySigner {
		slices.SortFunc(rows, func(a, b managedTx) int {
			return cmp.Or(a.createdAt.Compare(b.createdAt), cmp.Compare(a.nonce, b.nonce))
		})
		highest := rows[0].nonce
		for _, tx := range rows[1:] {
			if tx.nonce < highest {
				n++
			}
			highest = max(highest, tx.nonce)
		}
	}
	return n
}

// noncesBroadcastForTwoTxs counts the (signer, nonce) pairs signed for more than one
// transaction: two intents competed for one slot and one of them was lost.
func noncesBroadcastForTwoTxs(attempts []attempt) int {
	type slot struct {
		signer string
		nonce  uint64
	}
	holders := map[slot]map[string]bool{}
	for _, a := range attempts {
		s := slot{a.signer, a.nonce}
		if holders[s] == nil {
			holders[s] = map[string]bool{}
		}
		holders[s][a.txID] = true
	}
	n := 0
	for _, txs := range holders {
		if len(txs) > 1 {
			n++
		}
	}
	return n
}

// finalCount counts the transactions in a final state.
func finalCount(txs []managedTx) int {
	n := 0
	for _, tx := range txs {
		if tx.state.Final() {
			n++
		}
	}
	return n
}

// finalWithoutOneCompletion counts the final transactions whose completion is missing or
// written twice.
func finalWithoutOneCompletion(txs []managedTx) int {
	n := 0
	for _, tx := range txs {
		want := 1
		if tx.heldForAdopter {
			want = 0
		}
		if tx.state.Final() && tx.completions != want {
			n++
		}
	}
	return n
}

// heldForAdopters counts the final transactions whose completion waits for an adopter.
func heldForAdopters(txs []managedTx) int {
	n := 0
	for _, tx := range txs {
		if tx.state.Final() && tx.heldForAdopter {
			n++
		}
	}
	return n
}

// feedCounts compares the completion feed with the final transactions: those the feed
// never served, and the transactions it served more than once. served is how often the
// feed served each tx id.
func feedCounts(txs []managedTx, served map[string]int) (missing, twice int) {
	for _, tx := range txs {
		if tx.state.Final() && !tx.heldForAdopter && served[strings.ToLower(tx.id)] == 0 {
			missing++
		}
	}
	for _, times := range served {
		if times > 1 {
			twice++
		}
	}
	return missing, twice
}

// signersOffRecord counts the signers whose nonce on the chain differs from the number of
// their managed transactions there: every nonce the chain used must be one the service
// gave out, and every one it gave out must be used.
func signersOffRecord(chainNonces map[common.Address]uint64, txs []managedTx) int {
	managed := map[common.Address]uint64{}
	for _, tx := range txs {
		managed[common.HexToAddress(tx.signer)]++
	}
	n := 0
	for signer, nonce := range chainNonces {
		if nonce != managed[signer] {
			n++
		}
	}
	return n
}

// confirmedOnRecord is what the database holds of the confirmed transactions, to be
// compared with the chain.
func confirmedOnRecord(txs []managedTx) []e2e.ExpectedTx {
	var out []e2e.ExpectedTx
	for _, tx := range txs {
		if tx.state == domain.StateConfirmed {
			out = append(out, e2e.ExpectedTx{TxID: tx.id, Signer: common.HexToAddress(tx.signer), Nonce: tx.nonce,
				TxHash: common.HexToHash(tx.txHash), BlockNumber: tx.block})
		}
	}
	return out
}

// recordRows are the checks of one chain's database rows: what the load was told is there,
// each signer's nonces (given once, in order, without gaps, each broadcast for one
// transaction), and every transaction final with one completion.
func recordRows(ackedIDs []string, rec chainRecords) []row {
	final := finalCount(rec.txs)
	return []row{
		{"creates acknowledged on this chain", len(ackedIDs), "> 0"},
		{"acknowledged creates lost", len(lostAcknowledged(ackedIDs, rec.txs)), "0"},
		{"duplicate nonces (signer, nonce)", duplicateNonces(rec.txs), "0"},
		{"nonce regressions (later allocation, lower nonce)", nonceRegressions(rec.txs), "0"},
		{"gaps in a signer's nonces", signersWithGaps(rec.txs), "0"},
		{"nonces broadcast for two different txs", noncesBroadcastForTwoTxs(rec.attempts), "0"},
		{"transactions not final", len(rec.txs) - final, "0"},
		{"transactions final", final, "> 0"},
		{"final without a completion / completion twice", finalWithoutOneCompletion(rec.txs), "0"},
	}
}

// The database failover scenario's own counts (make chaos-db).

// noncesGivenTwice is the nonces ("chain/signer/nonce", sorted) that the service
// acknowledged to more than one transaction; holders lists the tx ids acknowledged with
// each nonce.
func noncesGivenTwice(holders map[string][]string) []string {
	var keys []string
	for key, ids := range holders {
		if len(ids) > 1 {
			keys = append(keys, key)
		}
	}
	slices.Sort(keys)
	return keys
}

// lostByFault attributes each lost create to the first failover after its acknowledgement
// (an answer may reach the client a moment after the primary that committed it died, so
// up to 2 s after the fault still counts as before it); one acknowledged after every fault
// goes with the last. It returns one count per event.
func lostByFault(lost []string, ackedAt map[string]time.Time, events []faultEvent) []int {
	counts := make([]int, len(events))
	if len(events) == 0 {
		return counts
	}
	for _, id := range lost {
		counts[faultOf(ackedAt[id], events)]++
	}
	return counts
}

// faultOf is the fault an acknowledged create lost was lost in: the first one it was
// acknowledged before (or just after: answers to commits before the fault arrive after it),
// else the last.
func faultOf(acked time.Time, events []faultEvent) int {
	for i, ev := range events {
		if acked.Before(ev.when.Add(2 * time.Second)) {
			return i
		}
	}
	return len(events) - 1
}

// lostBySigner is, per fault (as lostByFault assigns them), the fewest and the most
// acknowledged creates one signer lost in it (of the signers that lost any): how deep a
// recovery that fault asked of each.
func lostBySigner(lost []string, ackedAt map[string]time.Time, ackSigner map[string]string, events []faultEvent) (fewest, most []int) {
	perSigner := make([]map[string]int, len(events))
	for i := range perSigner {
		perSigner[i] = map[string]int{}
	}
	for _, id := range lost {
		if len(events) > 0 {
			perSigner[faultOf(ackedAt[id], events)][ackSigner[id]]++
		}
	}
	fewest, most = make([]int, len(events)), make([]int, len(events))
	for i, counts := range perSigner {
		for _, n := range counts {
			if fewest[i] == 0 || n < fewest[i] {
				fewest[i] = n
			}
			most[i] = max(most[i], n)
		}
	}
	return fewest, most
}

// executedTwice counts the requests whose data (unique per request) the chain holds more
// than once: one request executed twice.
func executedTwice(onChain []chainTx) int {
	perData := map[string]int{}
	for _, tx := range onChain {
		perData[tx.data]++
	}
	n := 0
	for _, times := range perData {
		if times > 1 {
			n++
		}
	}
	return n
}

// unknownToDatabase is the chain's transactions whose hash the database holds neither an
// attempt nor a final hash for.
func unknownToDatabase(onChain []chainTx, known map[common.Hash]bool) []chainTx {
	var out []chainTx
	for _, tx := range onChain {
		if !known[tx.hash] {
			out = append(out, tx)
		}
	}
	return out
}

// quarantineCounts is what the admin API said of the signers against what the chain holds.
type quarantineCounts struct {
	// quarantined signers, whatever the reason.
	quarantined int
	// notQuarantined are signers with transactions unknown to the database that are not
	// quarantined: the service would allocate over nonces it does not own.
	notQuarantined int
	// unlisted are unknown transactions the signer's quarantine listing does not show
	// (found, at its nonce, with its hash).
	unlisted int
}

// countQuarantines compares each signer's quarantine answer with the chain's transactions
// unknown to the database.
func countQuarantines(answers map[common.Address]*v1.Quarantine, unknown []chainTx) quarantineCounts {
	affected := map[common.Address]bool{}
	for _, tx := range unknown {
		affected[tx.signer] = true
	}
	var c quarantineCounts
	for signer, q := range answers {
		if q.GetQuarantined() {
			c.quarantined++
		}
		if !affected[signer] {
			continue
		}
		if !q.GetQuarantined() {
			c.notQuarantined++
		}
		listed := map[string]bool{}
		for _, u := range q.GetUnknownNonces() {
			if u.GetFound() {
				listed[fmt.Sprintf("%d/%s", u.GetNonce(), strings.ToLower(u.GetTxHash()))] = true
			}
		}
		for _, tx := range unknown {
			if tx.signer == signer && !listed[fmt.Sprintf("%d/%s", tx.nonce, strings.ToLower(tx.hash.Hex()))] {
				c.unlisted++
			}
		}
	}
	return c
}

// failedByOwnTx counts the transactions failed as "nonce taken" whose own intent (the same
// data at the same signer and nonce) the chain holds: the service lost track of its own
// broadcast and failed a transaction that went through.
func failedByOwnTx(failed, onChain []chainTx) int {
	type slot struct {
		signer common.Address
		nonce  uint64
	}
	atSlot := map[slot]chainTx{}
	for _, tx := range onChain {
		atSlot[slot{tx.signer, tx.nonce}] = tx
	}
	n := 0
	for _, f := range failed {
		if tx, ok := atSlot[slot{f.signer, f.nonce}]; ok && tx.data == strings.ToLower(f.data) {
			n++
		}
	}
	return n
}

// retryOutcome counts how the retries of lost requests were answered after recovery.
type retryOutcome struct {
	sent int
	// adopted were answered with their transaction recovered from the chain; fresh with a
	// new transaction (their request never reached the chain); refused got no answer.
	adopted, fresh, refused int
	refusedBy               map[string]int
}

// servingAgain is, for each signer, how long after the failover its first create was
// acknowledged: the longest of those, and the signers with none after it.
func servingAgain(ackSigner map[string]string, ackedAt map[string]time.Time, signers []common.Address, failover time.Time) (longest time.Duration, never int) {
	first := map[string]time.Time{}
	for id, at := range ackedAt {
		signer := ackSigner[id]
		if at.Before(failover) {
			continue
		}
		if prev, ok := first[signer]; !ok || at.Before(prev) {
			first[signer] = at
		}
	}
	for _, s := range signers {
		at, ok := first[s.Hex()]
		if !ok {
			never++
			continue
		}
		longest = max(longest, at.Sub(failover))
	}
	return longest, never
}
