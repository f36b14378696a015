package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

const (
	signerA = "0x00000000000000000000000000000000000000Aa"
	signerB = "0x00000000000000000000000000000000000000bB"
)

var batch0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// mtx is a final (CONFIRMED, one completion) transaction of signer at nonce, allocated in
// batch (seconds after batch0).
func mtx(id, signer string, nonce uint64, batch int) managedTx {
	return managedTx{id: id, signer: signer, nonce: nonce, state: domain.StateConfirmed,
		createdAt: batch0.Add(time.Duration(batch) * time.Second), txHash: "0x01", block: 1, completions: 1}
}

func with(tx managedTx, change func(*managedTx)) managedTx {
	change(&tx)
	return tx
}

// A healthy chain: two signers, each with nonces 0..2 over two batches, all final.
func healthyTxs() []managedTx {
	return []managedTx{
		mtx("a0", signerA, 0, 0), mtx("a1", signerA, 1, 0), mtx("a2", signerA, 2, 1),
		mtx("b0", signerB, 0, 0), mtx("b1", signerB, 1, 1), mtx("b2", signerB, 2, 2),
	}
}

func TestNonceInvariants(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name                          string
		txs                           []managedTx
		duplicates, gaps, regressions int
	}{
		{name: "healthy", txs: healthyTxs()},
		{name: "no transactions", txs: nil},
		{
			name: "one nonce held twice",
			txs:  append(healthyTxs(), mtx("a1bis", signerA, 1, 2)),
			// The second holder of nonce 1 came in a later batch than nonce 2: a regression too.
			duplicates: 1, regressions: 1,
		},
		{
			name:       "two signers each with a duplicate",
			txs:        append(healthyTxs(), mtx("a2bis", signerA, 2, 1), mtx("b0bis", signerB, 0, 0)),
			duplicates: 2,
		},
		{
			name: "nonce 1 missing",
			txs:  []managedTx{mtx("a0", signerA, 0, 0), mtx("a2", signerA, 2, 0), mtx("a3", signerA, 3, 1)},
			gaps: 1,
		},
		{
			name: "nonce 0 missing",
			txs:  []managedTx{mtx("a1", signerA, 1, 0), mtx("b0", signerB, 0, 0)},
			gaps: 1,
		},
		{
			// The count alone (max+1 == rows) would hide this gap behind the duplicate.
			name:       "gap hidden by a duplicate",
			txs:        []managedTx{mtx("a0", signerA, 0, 0), mtx("a0bis", signerA, 0, 0), mtx("a2", signerA, 2, 0)},
			duplicates: 1, gaps: 1,
		},
		{
			name: "a later batch got lower nonces",
			txs: []managedTx{
				mtx("a0", signerA, 0, 0), mtx("a3", signerA, 3, 0),
				mtx("a1", signerA, 1, 1), mtx("a2", signerA, 2, 2),
			},
			regressions: 2,
		},
		{
			// Rows of one batch tie on time and are taken in nonce order.
			name: "one batch listed out of order",
			txs:  []managedTx{mtx("a2", signerA, 2, 0), mtx("a0", signerA, 0, 0), mtx("a1", signerA, 1, 0)},
		},
		{
			// Another signer's higher nonces say nothing about this one's order.
			name: "regression is per signer",
			txs:  []managedTx{mtx("b5", signerB, 5, 0), mtx("a0", signerA, 0, 1)},
			gaps: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := duplicateNonces(tc.txs); got != tc.duplicates {
				t.Errorf("duplicateNonces = %d, want %d", got, tc.duplicates)
			}
			if got := signersWithGaps(tc.txs); got != tc.gaps {
				t.Errorf("signersWithGaps = %d, want %d", got, tc.gaps)
			}
			if got := nonceRegressions(tc.txs); got != tc.regressions {
				t.Errorf("nonceRegressions = %d, want %d", got, tc.regressions)
			}
		})
	}
}

func TestNoncesBroadcastForTwoTxs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		attempts []attempt
		want     int
	}{
		{name: "none", want: 0},
		{name: "rebroadcasts of one tx", attempts: []attempt{{"t1", signerA, 0}, {"t1", signerA, 0}, {"t2", signerA, 1}}, want: 0},
		{name: "same nonce, different signers", attempts: []attempt{{"t1", signerA, 0}, {"t2", signerB, 0}}, want: 0},
		{name: "two txs at one nonce", attempts: []attempt{{"t1", signerA, 0}, {"t2", signerA, 0}, {"t1", signerA, 0}}, want: 1},
		{name: "three txs at one nonce count once", attempts: []attempt{{"t1", signerA, 4}, {"t2", signerA, 4}, {"t3", signerA, 4}}, want: 1},
		{name: "two slots", attempts: []attempt{{"t1", signerA, 0}, {"t2", signerA, 0}, {"t3", signerB, 7}, {"t4", signerB, 7}}, want: 2},
	}
	for _, tc := range tests {
		if got := noncesBroadcastForTwoTxs(tc.attempts); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestFinalAndCompletions(t *testing.T) {
	t.Parallel()
	healthy := healthyTxs()
	tests := []struct {
		name                string
		txs                 []managedTx
		final, noCompletion int
		missingFeed, twice  int
		served              map[string]int
	}{
		{name: "healthy", txs: healthy, final: 6, served: map[string]int{"a0": 1, "a1": 1, "a2": 1, "b0": 1, "b1": 1, "b2": 1}},
		{
			name: "open transactions count neither as final nor as missing",
			txs: []managedTx{
				mtx("a0", signerA, 0, 0),
				with(mtx("a1", signerA, 1, 0), func(tx *managedTx) { tx.state, tx.completions = domain.StateTracking, 0 }),
				with(mtx("a2", signerA, 2, 0), func(tx *managedTx) { tx.state, tx.completions = domain.StateStuck, 0 }),
				with(mtx("a3", signerA, 3, 0), func(tx *managedTx) { tx.state, tx.completions = domain.StateAllocated, 0 }),
			},
			final: 1, served: map[string]int{"a0": 1},
		},
		{
			name: "failed final is final and needs its completion",
			txs: []managedTx{
				with(mtx("a0", signerA, 0, 0), func(tx *managedTx) { tx.state, tx.completions = domain.StateFailedFinal, 0 }),
			},
			final: 1, noCompletion: 1, missingFeed: 1, served: map[string]int{},
		},
		{
			name: "completion written twice",
			txs: []managedTx{
				with(mtx("a0", signerA, 0, 0), func(tx *managedTx) { tx.completions = 2 }), mtx("a1", signerA, 1, 0),
			},
			final: 2, noCompletion: 1, served: map[string]int{"a0": 1, "a1": 1},
		},
		{
			name: "feed misses one and serves another twice",
			txs:  healthy, final: 6, missingFeed: 1, twice: 1,
			served: map[string]int{"a0": 2, "a1": 1, "a2": 1, "b0": 1, "b1": 1},
		},
		{
			// An entry for a tx the chain does not hold cannot stand in for a missing one.
			name:  "feed serves a stranger instead of a final tx",
			txs:   []managedTx{mtx("a0", signerA, 0, 0), mtx("a1", signerA, 1, 0)},
			final: 2, missingFeed: 1, served: map[string]int{"a0": 1, "zz": 1},
		},
		{
			// A recovered transaction no create adopted yet: its completion is held back,
			// neither missing nor owed to the feed; one that was written anyway is counted.
			name: "completion held for an adopter",
			txs: []managedTx{
				with(mtx("a0", signerA, 0, 0), func(tx *managedTx) { tx.completions, tx.heldForAdopter = 0, true }),
				with(mtx("a1", signerA, 1, 0), func(tx *managedTx) { tx.completions, tx.heldForAdopter = 1, true }),
			},
			final: 2, noCompletion: 1, served: map[string]int{"a1": 1},
		},
		{
			name:  "tx ids compare without case",
			txs:   []managedTx{mtx("AB", signerA, 0, 0)},
			final: 1, served: map[string]int{"ab": 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := finalCount(tc.txs); got != tc.final {
				t.Errorf("finalCount = %d, want %d", got, tc.final)
			}
			if got := finalWithoutOneCompletion(tc.txs); got != tc.noCompletion {
				t.Errorf("finalWithoutOneCompletion = %d, want %d", got, tc.noCompletion)
			}
			missing, twice := feedCounts(tc.txs, tc.served)
			if missing != tc.missingFeed || twice != tc.twice {
				t.Errorf("feedCounts = (missing %d, twice %d), want (%d, %d)", missing, twice, tc.missingFeed, tc.twice)
			}
		})
	}
}

func TestLostAcknowledged(t *testing.T) {
	t.Parallel()
	txs := []managedTx{mtx("0b7b5a6e-1111-4c1a-9a00-000000000001", signerA, 0, 0), mtx("0b7b5a6e-1111-4c1a-9a00-000000000002", signerA, 1, 0)}
	tests := []struct {
		name  string
		acked []string
		want  []string
	}{
		{name: "all held", acked: []string{"0b7b5a6e-1111-4c1a-9a00-000000000002", "0b7b5a6e-1111-4c1a-9a00-000000000001"}},
		{name: "nothing acknowledged"},
		{name: "upper case id is the same id", acked: []string{"0B7B5A6E-1111-4C1A-9A00-000000000001"}},
		{
			name:  "two lost, in acknowledgement order",
			acked: []string{"0b7b5a6e-1111-4c1a-9a00-000000000009", "0b7b5a6e-1111-4c1a-9a00-000000000001", "0b7b5a6e-1111-4c1a-9a00-000000000003"},
			want:  []string{"0b7b5a6e-1111-4c1a-9a00-000000000009", "0b7b5a6e-1111-4c1a-9a00-000000000003"},
		},
	}
	for _, tc := range tests {
		if got := lostAcknowledged(tc.acked, txs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: lost %v, want %v", tc.name, got, tc.want)
		}
	}
	upperHeld := []managedTx{mtx("0B7B5A6E-1111-4C1A-9A00-000000000001", signerA, 0, 0)}
	if got := lostAcknowledged([]string{"0b7b5a6e-1111-4c1a-9a00-000000000001"}, upperHeld); len(got) != 0 {
		t.Errorf("an id held in upper case counted as lost: %v", got)
	}
}

func TestSignersOffRecord(t *testing.T) {
	t.Parallel()
	a, b := common.HexToAddress(signerA), common.HexToAddress(signerB)
	txs := healthyTxs() // three each
	tests := []struct {
		name   string
		nonces map[common.Address]uint64
		want   int
	}{
		{name: "chain agrees", nonces: map[common.Address]uint64{a: 3, b: 3}, want: 0},
		{name: "chain used a nonce the service never gave", nonces: map[common.Address]uint64{a: 4, b: 3}, want: 1},
		{name: "a managed tx never reached the chain", nonces: map[common.Address]uint64{a: 3, b: 2}, want: 1},
		{name: "signer with nothing managed but a used nonce", nonces: map[common.Address]uint64{common.HexToAddress("0xcc"): 1}, want: 1},
		{name: "signer with nothing anywhere", nonces: map[common.Address]uint64{common.HexToAddress("0xcc"): 0}, want: 0},
	}
	for _, tc := range tests {
		if got := signersOffRecord(tc.nonces, txs); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

func TestConfirmedOnRecord(t *testing.T) {
	t.Parallel()
	txs := []managedTx{
		with(mtx("a0", signerA, 0, 0), func(tx *managedTx) { tx.txHash, tx.block = "0xabc", 42 }),
		with(mtx("a1", signerA, 1, 0), func(tx *managedTx) { tx.state = domain.StateFailedFinal }),
		with(mtx("a2", signerA, 2, 0), func(tx *managedTx) { tx.state = domain.StateTracking }),
	}
	got := confirmedOnRecord(txs)
	if len(got) != 1 {
		t.Fatalf("got %d expected txs, want only the confirmed one: %+v", len(got), got)
	}
	want := common.HexToHash("0xabc")
	if got[0].TxID != "a0" || got[0].Signer != common.HexToAddress(signerA) || got[0].Nonce != 0 || got[0].TxHash != want || got[0].BlockNumber != 42 {
		t.Fatalf("got %+v, want a0 from %s, nonce 0, hash %s, block 42", got[0], signerA, want)
	}
}

// recordRows keeps the table's order and wants; a fault in the rows shows in its row.
func TestRecordRows(t *testing.T) {
	t.Parallel()
	healthy := chainRecords{txs: healthyTxs(), attempts: []attempt{{"a0", signerA, 0}, {"b0", signerB, 0}}}
	rows := recordRows([]string{"a0", "b2"}, healthy)
	wantNames := []string{
		"creates acknowledged on this chain", "acknowledged creates lost", "duplicate nonces (signer, nonce)",
		"nonce regressions (later allocation, lower nonce)", "gaps in a signer's nonces", "nonces broadcast for two different txs",
		"transactions not final", "transactions final", "final without a completion / completion twice",
	}
	if len(rows) != len(wantNames) {
		t.Fatalf("%d rows, want %d", len(rows), len(wantNames))
	}
	for i, r := range rows {
		if r.name != wantNames[i] {
			t.Errorf("row %d is %q, want %q", i, r.name, wantNames[i])
		}
		if !r.ok() {
			t.Errorf("healthy chain: row %q = %d fails %q", r.name, r.value, r.want)
		}
	}

	broken := chainRecords{
		txs: append(healthyTxs(), with(mtx("a4", signerA, 4, 3), func(tx *managedTx) { tx.state, tx.completions = domain.StateTracking, 0 })),
	}
	failing := map[string]int{}
	for _, r := range recordRows([]string{"a0", "gone"}, broken) {
		if !r.ok() {
			failing[r.name] = r.value
		}
	}
	want := map[string]int{"acknowledged creates lost": 1, "gaps in a signer's nonces": 1, "transactions not final": 1}
	if len(failing) != len(want) {
		t.Fatalf("failing rows %v, want %v", failing, want)
	}
	for name, value := range want {
		if failing[name] != value {
			t.Errorf("row %q = %d, want %d failing", name, failing[name], value)
		}
	}
}

func TestNoncesGivenTwice(t *testing.T) {
	t.Parallel()
	holders := map[string][]string{
		"1337/0xa/0":  {"t1"},
		"1337/0xa/1":  {"t2", "t3"},
		"1337/0xb/0":  {"t4", "t5", "t6"},
		"31337/0xa/1": {"t7"},
	}
	if got, want := noncesGivenTwice(holders), []string{"1337/0xa/1", "1337/0xb/0"}; !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got := noncesGivenTwice(nil); len(got) != 0 {
		t.Fatalf("no holders: got %v", got)
	}
}

func TestLostByFault(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	events := []faultEvent{{kind: "planned", when: t0.Add(10 * time.Second)}, {kind: "kill", when: t0.Add(30 * time.Second)}}
	ackedAt := map[string]time.Time{
		"early":        t0.Add(5 * time.Second),  // before the first fault
		"just-after":   t0.Add(11 * time.Second), // within 2 s of the first: its answer was late
		"between":      t0.Add(20 * time.Second), // before the second
		"after-all":    t0.Add(40 * time.Second), // after every fault: the last takes it
		"at-the-limit": t0.Add(12 * time.Second), // exactly 2 s after: no longer before it
	}
	tests := []struct {
		name string
		lost []string
		want []int
	}{
		{name: "none lost", want: []int{0, 0}},
		{name: "one per fault", lost: []string{"early", "between"}, want: []int{1, 1}},
		{name: "late answer goes with the fault before it", lost: []string{"just-after"}, want: []int{1, 0}},
		{name: "2 s after is the next fault's", lost: []string{"at-the-limit"}, want: []int{0, 1}},
		{name: "after every fault goes with the last", lost: []string{"after-all", "early"}, want: []int{1, 1}},
	}
	for _, tc := range tests {
		if got := lostByFault(tc.lost, ackedAt, events); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestLostBySigner(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	events := []faultEvent{{kind: "kill", when: t0.Add(10 * time.Second)}, {kind: "kill-deep-lag", when: t0.Add(30 * time.Second)}}
	ackedAt := map[string]time.Time{"a1": t0.Add(5 * time.Second), "a2": t0.Add(20 * time.Second), "a3": t0.Add(21 * time.Second), "b1": t0.Add(22 * time.Second)}
	ackSigner := map[string]string{"a1": "0xA", "a2": "0xA", "a3": "0xA", "b1": "0xB"}
	tests := []struct {
		name                 string
		lost                 []string
		wantFewest, wantMost []int
	}{
		{name: "none lost", wantFewest: []int{0, 0}, wantMost: []int{0, 0}},
		{name: "per fault, per signer", lost: []string{"a1", "a2", "a3", "b1"}, wantFewest: []int{1, 1}, wantMost: []int{1, 2}},
		{name: "a signer that lost nothing is not the fewest", lost: []string{"a2", "a3"}, wantFewest: []int{0, 2}, wantMost: []int{0, 2}},
	}
	for _, tc := range tests {
		fewest, most := lostBySigner(tc.lost, ackedAt, ackSigner, events)
		if !slices.Equal(fewest, tc.wantFewest) || !slices.Equal(most, tc.wantMost) {
			t.Errorf("%s: fewest %v most %v, want %v %v", tc.name, fewest, most, tc.wantFewest, tc.wantMost)
		}
	}
}

func TestChainSideCounts(t *testing.T) {
	t.Parallel()
	a, b := common.HexToAddress(signerA), common.HexToAddress(signerB)
	h := func(n byte) common.Hash { return common.Hash{31: n} }
	onChain := []chainTx{
		{signer: a, nonce: 0, hash: h(1), data: "0x01"},
		{signer: a, nonce: 1, hash: h(2), data: "0x02"},
		{signer: a, nonce: 2, hash: h(3), data: "0x01"}, // request 0x01 again
		{signer: b, nonce: 0, hash: h(4), data: "0x04"},
	}
	if got := executedTwice(onChain); got != 1 {
		t.Errorf("executedTwice = %d, want 1", got)
	}
	if got := executedTwice(onChain[:2]); got != 0 {
		t.Errorf("executedTwice without a repeat = %d, want 0", got)
	}
	unknown := unknownToDatabase(onChain, map[common.Hash]bool{h(1): true, h(3): true})
	if len(unknown) != 2 || unknown[0].hash != h(2) || unknown[1].hash != h(4) {
		t.Errorf("unknownToDatabase = %+v, want the txs with hashes 2 and 4", unknown)
	}

	failed := []chainTx{
		{signer: a, nonce: 1, data: "0x02"}, // its own tx is at the nonce: the service lost track of it
		{signer: a, nonce: 0, data: "0xff"}, // another tx took the nonce: rightly failed
		{signer: b, nonce: 9, data: "0x04"}, // nothing at that nonce
		{signer: b, nonce: 0, data: "0x04"}, // its own again
	}
	if got := failedByOwnTx(failed, onChain); got != 2 {
		t.Errorf("failedByOwnTx = %d, want 2", got)
	}
	if got := failedByOwnTx([]chainTx{{signer: a, nonce: 1, data: "0x0A"}}, []chainTx{{signer: a, nonce: 1, data: "0x0a"}}); got != 1 {
		t.Errorf("failedByOwnTx compares the database's data in lower case: got %d, want 1", got)
	}
}

func TestCountQuarantines(t *testing.T) {
	t.Parallel()
	a, b, c := common.HexToAddress(signerA), common.HexToAddress(signerB), common.HexToAddress("0xcc")
	hash := common.Hash{31: 7}
	unknown := []chainTx{{signer: a, nonce: 5, hash: hash}}
	listing := func(found bool, nonce uint64, txHash string) *v1.Quarantine {
		return &v1.Quarantine{Quarantined: true, UnknownNonces: []*v1.UnknownNonce{{Nonce: nonce, TxHash: txHash, Found: found}}}
	}
	tests := []struct {
		name    string
		answers map[common.Address]*v1.Quarantine
		unknown []chainTx
		want    quarantineCounts
	}{
		{name: "nothing unknown, nothing quarantined", answers: map[common.Address]*v1.Quarantine{a: {}, b: {}}},
		{
			name:    "affected signer quarantined and its tx listed",
			answers: map[common.Address]*v1.Quarantine{a: listing(true, 5, hash.Hex()), b: {}},
			unknown: unknown, want: quarantineCounts{quarantined: 1},
		},
		{
			name:    "listing's hash in upper case still matches",
			answers: map[common.Address]*v1.Quarantine{a: listing(true, 5, "0x"+strings.ToUpper(hash.Hex()[2:]))},
			unknown: unknown, want: quarantineCounts{quarantined: 1},
		},
		{
			name:    "affected signer not quarantined",
			answers: map[common.Address]*v1.Quarantine{a: {}, b: {}},
			unknown: unknown, want: quarantineCounts{notQuarantined: 1, unlisted: 1},
		},
		{
			name:    "listed as not found",
			answers: map[common.Address]*v1.Quarantine{a: listing(false, 5, hash.Hex())},
			unknown: unknown, want: quarantineCounts{quarantined: 1, unlisted: 1},
		},
		{
			name:    "listed at another nonce",
			answers: map[common.Address]*v1.Quarantine{a: listing(true, 6, hash.Hex())},
			unknown: unknown, want: quarantineCounts{quarantined: 1, unlisted: 1},
		},
		{
			// A signer quarantined for a reason the chain does not show still counts as
			// quarantined (async replication reports it); it is not an error row.
			name:    "unaffected signer quarantined",
			answers: map[common.Address]*v1.Quarantine{c: {Quarantined: true}},
			want:    quarantineCounts{quarantined: 1},
		},
	}
	for _, tc := range tests {
		if got := countQuarantines(tc.answers, tc.unknown); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestServingAgain(t *testing.T) {
	failover := time.Unix(1000, 0)
	a, b, c := common.HexToAddress("0xa"), common.HexToAddress("0xb"), common.HexToAddress("0xc")
	ackSigner := map[string]string{"1": a.Hex(), "2": a.Hex(), "3": b.Hex(), "4": b.Hex(), "5": c.Hex()}
	ackedAt := map[string]time.Time{
		"1": failover.Add(-time.Second),     // before the failover: does not count
		"2": failover.Add(12 * time.Second), // a serves again after 12 s
		"3": failover.Add(20 * time.Second),
		"4": failover.Add(15 * time.Second), // b's first after the failover: 15 s
		"5": failover.Add(-3 * time.Second), // c never again
	}
	longest, never := servingAgain(ackSigner, ackedAt, []common.Address{a, b, c}, failover)
	if longest != 15*time.Second || never != 1 {
		t.Errorf("longest %s, never %d; want 15s and 1", longest, never)
	}
	if longest, never := servingAgain(nil, nil, nil, failover); longest != 0 || never != 0 {
		t.Errorf("no signers: %s %d", longest, never)
	}
}
