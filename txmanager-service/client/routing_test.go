package txmclient_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// basicRoutingNode answers a batch as a node in basic routing does: it creates for the
// signer it owns and refuses every other create NOT_LEADER, one by one.
type basicRoutingNode struct {
	v1.UnimplementedTxServiceServer
	owns string
	mu   sync.Mutex
	// refused counts the NOT_LEADER answers given.
	refused int
	// unavailable is how many of its own signer's creates it answers UNAVAILABLE (a node
	// starting, its database away) before it makes them.
	unavailable int
}

func (n *basicRoutingNode) CreateTxBatch(_ context.Context, r *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	out := &v1.CreateTxBatchResponse{}
	for _, create := range r.GetCreates() {
		if create.GetSigner() != n.owns {
			n.mu.Lock()
			n.refused++
			n.mu.Unlock()
			out.Results = append(out.Results, v1.CreateResultOf(nil, v1.ErrorNotLeader("signer %s is served by another node", create.GetSigner())))
			continue
		}
		n.mu.Lock()
		unavailable := n.unavailable > 0
		if unavailable {
			n.unavailable--
		}
		n.mu.Unlock()
		if unavailable {
			out.Results = append(out.Results, v1.CreateResultOf(nil, v1.ErrorUnavailable("database unavailable")))
			continue
		}
		out.Results = append(out.Results, v1.CreateResultOf(&v1.CreateTxResponse{Created: true,
			Tx: &v1.Tx{TxId: create.GetRequestId(), Signer: create.GetSigner(), State: "ALLOCATED"}}, nil))
	}
	return out, nil
}

func (n *basicRoutingNode) CreateTx(_ context.Context, r *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	if r.GetSigner() != n.owns {
		return nil, v1.ErrorNotLeader("signer %s is served by another node", r.GetSigner())
	}
	return &v1.CreateTxResponse{Created: true, Tx: &v1.Tx{TxId: r.GetRequestId(), Signer: r.GetSigner(), State: "ALLOCATED"}}, nil
}

// In basic routing, CreateMany sends the creates a node refused NOT_LEADER to the other
// endpoints, so every signer's creates reach its owner within the attempts allowed, however
// many endpoints there are before it in the list, and so does Create: each endpoint is
// tried once even where fewer attempts are allowed (txmctl allows 4). Before, the owner of
// a signer behind as many endpoints as attempts was never reached.
func TestCreateManyFindsEachSignersOwnerInBasicRouting(t *testing.T) {
	signers := []string{"0x00000000000000000000000000000000000000a1", "0x00000000000000000000000000000000000000b2",
		"0x00000000000000000000000000000000000000c3", "0x00000000000000000000000000000000000000d4", "0x00000000000000000000000000000000000000e5"}
	endpoints := make([]string, len(signers))
	nodes := make([]*basicRoutingNode, len(signers))
	for i, signer := range signers {
		nodes[i] = &basicRoutingNode{owns: signer}
		endpoints[i] = serve(t, nodes[i], nil)
	}
	tests := []struct {
		name        string
		maxAttempts int
	}{
		{"as many attempts as endpoints", len(endpoints)},
		{"fewer attempts than endpoints", len(endpoints) - 2},
		{"the default attempts", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := newClient(t, txmclient.Config{Endpoints: endpoints,
				MaxAttempts: tt.maxAttempts, Backoff: 10 * time.Millisecond})
			var reqs []*v1.CreateTxRequest
			for i := range 30 {
				reqs = append(reqs, &v1.CreateTxRequest{Signer: signers[i%len(signers)], RequestId: "payout-" + strconv.Itoa(i)})
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			results, err := client.CreateMany(ctx, reqs)
			if err != nil {
				t.Fatalf("CreateMany: %v", err)
			}
			for i, r := range results {
				if r.Err != nil || !r.Response.GetCreated() || r.Response.GetTx().GetSigner() != reqs[i].GetSigner() {
					t.Errorf("creates[%d] for %s: %v %v, want created by its signer's owner", i, reqs[i].GetSigner(), r.Response, r.Err)
				}
			}
			last := signers[len(signers)-1]
			if one, err := client.Create(ctx, &v1.CreateTxRequest{Signer: last, RequestId: "single"}); err != nil || one.GetTx().GetSigner() != last {
				t.Errorf("Create for the last endpoint's signer: %v %v, want created by its owner", one, err)
			}
		})
	}
}

// A create whose owner is the last endpoint and refuses it first for a reason that passes
// (UNAVAILABLE) is sent again: CreateMany counts a create's attempts by its own refusals,
// not by the rounds it spent finding its owner. Before, with fewer attempts than endpoints,
// the tour used them up and the owner's first refusal was final.
func TestCreateManyRetriesAnOwnersRefusalAfterFindingIt(t *testing.T) {
	signers := []string{"0x00000000000000000000000000000000000000a1", "0x00000000000000000000000000000000000000b2",
		"0x00000000000000000000000000000000000000c3", "0x00000000000000000000000000000000000000d4"}
	endpoints := make([]string, len(signers))
	for i, signer := range signers {
		node := &basicRoutingNode{owns: signer}
		if i == len(signers)-1 {
			node.unavailable = 2
		}
		endpoints[i] = serve(t, node, nil)
	}
	client := newClient(t, txmclient.Config{Endpoints: endpoints, MaxAttempts: 3, Backoff: 10 * time.Millisecond})
	last := signers[len(signers)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	results, err := client.CreateMany(ctx, []*v1.CreateTxRequest{{Signer: last, RequestId: "payout-last"}, {Signer: signers[0], RequestId: "payout-first"}})
	if err != nil {
		t.Fatalf("CreateMany: %v", err)
	}
	for i, r := range results {
		if r.Err != nil || !r.Response.GetCreated() {
			t.Errorf("creates[%d]: %v %v, want created by its owner after its refusals", i, r.Response, r.Err)
		}
	}
}
