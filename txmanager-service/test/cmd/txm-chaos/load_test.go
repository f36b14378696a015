package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// The load's record is what the checker holds the database to: each answer it takes in
// must leave the counts a checker row reads.
func TestLoadRecordAcked(t *testing.T) {
	t.Parallel()
	answer := func(id string, chain, nonce uint64, created bool) *v1.CreateTxResponse {
		return &v1.CreateTxResponse{Tx: &v1.Tx{TxId: id, ChainId: chain, Nonce: nonce}, Created: created}
	}
	req := func(signer string, chain uint64, requestID string) *v1.CreateTxRequest {
		return &v1.CreateTxRequest{Signer: signer, ChainId: chain, RequestId: requestID}
	}
	type step struct {
		req  *v1.CreateTxRequest
		resp *v1.CreateTxResponse
	}
	tests := []struct {
		name                     string
		steps                    []step
		acknowledged, otherChain int
		replayDiffs, keyed       int
		givenTwice               []string
		ackedOn                  map[uint64]int
	}{
		{
			name: "distinct creates on two chains",
			steps: []step{
				{req(signerA, 1337, ""), answer("t1", 1337, 0, true)},
				{req(signerA, 31337, "r1"), answer("t2", 31337, 0, true)}, // the same nonce on another chain is another slot
				{req(signerB, 1337, "r1"), answer("t3", 1337, 0, true)},   // the same request id of another signer is another request
			},
			acknowledged: 3, keyed: 2, ackedOn: map[uint64]int{1337: 2, 31337: 1},
		},
		{
			name: "a retried request answered with its transaction again",
			steps: []step{
				{req(signerA, 1337, "r1"), answer("t1", 1337, 4, true)},
				{req(signerA, 1337, "r1"), answer("t1", 1337, 4, false)},
			},
			acknowledged: 1, keyed: 1, ackedOn: map[uint64]int{1337: 1},
		},
		{
			name: "a retried request answered with another transaction",
			steps: []step{
				{req(signerA, 1337, "r1"), answer("t1", 1337, 4, true)},
				{req(signerA, 1337, "r1"), answer("t2", 1337, 5, true)},
			},
			acknowledged: 2, keyed: 2, replayDiffs: 1, ackedOn: map[uint64]int{1337: 2},
		},
		{
			name: "one nonce acknowledged to two transactions",
			steps: []step{
				{req(signerA, 1337, ""), answer("t1", 1337, 7, true)},
				{req(signerA, 1337, ""), answer("t2", 1337, 7, true)},
			},
			acknowledged: 2, givenTwice: []string{"1337/" + signerA + "/7"}, ackedOn: map[uint64]int{1337: 2},
		},
		{
			name: "acknowledged on another chain than named",
			steps: []step{
				{req(signerA, 1337, ""), answer("t1", 31337, 0, true)},
				{req(signerA, 0, ""), answer("t2", 1337, 0, true)}, // naming no chain takes the deployment's
			},
			acknowledged: 2, otherChain: 1, ackedOn: map[uint64]int{31337: 1, 1337: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := newLoadRecord()
			for _, s := range tc.steps {
				rec.acked(s.req, s.resp)
			}
			if len(rec.acknowledged) != tc.acknowledged || rec.otherChain != tc.otherChain || rec.replayDiffs != tc.replayDiffs || len(rec.keyed) != tc.keyed {
				t.Errorf("acknowledged %d, other chain %d, replay diffs %d, keyed %d; want %d, %d, %d, %d",
					len(rec.acknowledged), rec.otherChain, rec.replayDiffs, len(rec.keyed), tc.acknowledged, tc.otherChain, tc.replayDiffs, tc.keyed)
			}
			if got := noncesGivenTwice(rec.nonceHolders); !slices.Equal(got, tc.givenTwice) {
				t.Errorf("nonces given twice %v, want %v", got, tc.givenTwice)
			}
			for chain, n := range tc.ackedOn {
				if got := len(rec.ackedOn()[chain]); got != n {
					t.Errorf("acked on chain %d: %d, want %d", chain, got, n)
				}
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want string
	}{
		{nil, "none"},
		{&e2e.APIError{Status: 503, Reason: "NOT_LEADER"}, "503 NOT_LEADER"},
		{fmt.Errorf("create: %w", &e2e.APIError{Status: 409, Reason: "FENCED"}), "409 FENCED"},
		{errors.New("connection refused"), "transport error"},
	}
	for _, tc := range tests {
		if got := reasonOf(tc.err); got != tc.want {
			t.Errorf("reasonOf(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A seed replays the chain scenario's schedule: every fault once, in the seed's order.
func TestShuffledChainFaults(t *testing.T) {
	t.Parallel()
	names := func(seed uint64) []string {
		var out []string
		for _, f := range shuffledChainFaults(rand.New(rand.NewPCG(seed, 11))) {
			out = append(out, f.name)
		}
		return out
	}
	var all []string
	for _, f := range chainFaults() {
		all = append(all, f.name)
	}
	slices.Sort(all)
	orders := map[string]bool{}
	for seed := range uint64(20) {
		got := names(seed)
		if !slices.Equal(got, names(seed)) {
			t.Fatalf("seed %d gave two orders", seed)
		}
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, all) {
			t.Fatalf("seed %d: %v, want every fault of %v once", seed, got, all)
		}
		orders[fmt.Sprint(got)] = true
	}
	if len(orders) < 10 {
		t.Fatalf("20 seeds gave %d orders: the seed hardly moves the schedule", len(orders))
	}
}
