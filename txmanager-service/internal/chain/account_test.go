package chain_test

import (
	"math/big"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// The balance and the nonce the funds check reads describe one block, the head the
// endpoint reported. Behind a provider that spreads requests over several nodes, the read
// may reach a node two blocks behind the one that gave the head (a fault proxy serving every
// other request so), which answers "header not found" for that block: the read goes lower,
// and still describes one block.
func TestAccountAtReadsBalanceAndNonceAtOneBlock(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	key, account := sim.DevKeys()[0], sim.DevAddresses()[0]
	for nonce := range uint64(8) { // a transfer in each block: the nonce and the balance differ at each
		_, raw := transfer(t, sim, key, nonce)
		sendRaw(t, ctx, sim, raw)
		sim.Commit()
	}
	head, err := sim.Backend().Client().BlockNumber(ctx)
	if err != nil {
		t.Fatal(err)
	}
	atBlock := func(block uint64) services.AccountState {
		t.Helper()
		number := new(big.Int).SetUint64(block)
		balance, err := sim.Backend().Client().BalanceAt(ctx, account, number)
		if err != nil {
			t.Fatal(err)
		}
		nonce, err := sim.Backend().Client().NonceAt(ctx, account, number)
		if err != nil {
			t.Fatal(err)
		}
		return services.AccountState{Balance: balance, Nonce: nonce, Block: block}
	}
	tests := []struct {
		name string
		// lagEveryOther: every other request reaches a node two blocks behind, the head's
		// request a node in step.
		lagEveryOther bool
		wantBlock     uint64
	}{
		{name: "one node: the head", wantBlock: head},
		{name: "the read reaches a node two blocks behind: lower", lagEveryOther: true, wantBlock: head - 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			proxy, err := faultproxy.Start(sim.HTTPEndpoint())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			endpoint, err := chain.DialRPC(ctx, proxy.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(endpoint.Close)
			if tc.lagEveryOther {
				proxy.SetLag(2, true)
				if err := proxy.SetMode(faultproxy.Lag); err != nil {
					t.Fatal(err)
				}
				// Request 1 goes to the node behind; the head's, request 2, to the one in step.
				if _, err := endpoint.ChainID(ctx); err != nil {
					t.Fatal(err)
				}
			}
			got, err := endpoint.AccountAt(ctx, account)
			if err != nil {
				t.Fatal(err)
			}
			want := atBlock(tc.wantBlock)
			if got.Block != want.Block || got.Nonce != want.Nonce || got.Balance.Cmp(want.Balance) != 0 {
				t.Fatalf("AccountAt = block %d nonce %d balance %s; want block %d nonce %d balance %s",
					got.Block, got.Nonce, got.Balance, want.Block, want.Nonce, want.Balance)
			}
		})
	}
}
