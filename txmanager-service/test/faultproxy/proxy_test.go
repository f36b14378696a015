package faultproxy_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

func TestProxyModes(t *testing.T) {
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sim.Close() }()
	for range 10 {
		sim.Commit()
	}
	proxy, err := faultproxy.Start(sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	client, err := chain.DialRPC(context.Background(), proxy.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	head := func(t *testing.T, timeout time.Duration) (uint64, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		h, err := client.LatestHeader(ctx)
		if err != nil {
			return 0, err
		}
		return h.Number, nil
	}
	real, err := head(t, 5*time.Second)
	if err != nil || real != 10 {
		t.Fatalf("head through the proxy: %d, %v; want 10", real, err)
	}

	t.Run("lag", func(t *testing.T) {
		proxy.SetLag(4, false)
		if err := proxy.SetMode(faultproxy.Lag); err != nil {
			t.Fatal(err)
		}
		if got, err := head(t, 5*time.Second); err != nil || got != 6 {
			t.Fatalf("lagging head: %d, %v; want 6", got, err)
		}
		headers, err := client.HeadersByNumber(context.Background(), []uint64{5, 6, 7, 10})
		if err != nil {
			t.Fatal(err)
		}
		if headers[0] == nil || headers[1] == nil || headers[2] != nil || headers[3] != nil {
			t.Fatalf("headers 5, 6, 7, 10 behind a head of 6: %v", headers)
		}
	})
	t.Run("lag on every other request", func(t *testing.T) {
		proxy.SetLag(4, true)
		seen := map[uint64]bool{}
		for range 6 {
			got, err := head(t, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			seen[got] = true
		}
		if !seen[6] || !seen[10] || len(seen) != 2 {
			t.Fatalf("heads seen %v, want 6 and 10", seen)
		}
	})
	t.Run("no old state", func(t *testing.T) {
		proxy.SetStateKept(3)
		if err := proxy.SetMode(faultproxy.NoOldState); err != nil {
			t.Fatal(err)
		}
		account := sim.DevKeys()[0].PublicKey
		signer := crypto.PubkeyToAddress(account)
		for _, tc := range []struct {
			block   uint64
			refused bool
		}{{block: 10}, {block: 7}, {block: 6, refused: true}, {block: 1, refused: true}} {
			refusedBefore := proxy.OldStateRefused()
			_, err := client.NonceAtBlock(context.Background(), signer, tc.block)
			if refused := err != nil; refused != tc.refused || (proxy.OldStateRefused() > refusedBefore) != tc.refused {
				t.Fatalf("nonce at block %d behind a node keeping 3 blocks below head 10: %v, want refused %v", tc.block, err, tc.refused)
			}
		}
		if headers, err := client.HeadersByNumber(context.Background(), []uint64{1}); err != nil || headers[0] == nil {
			t.Fatalf("an old block's header: %v, %v; a node without old state still serves old blocks", headers, err)
		}
		if _, err := client.NonceAt(context.Background(), signer); err != nil {
			t.Fatalf("the latest nonce: %v", err)
		}
	})
	t.Run("hang", func(t *testing.T) {
		if err := proxy.SetMode(faultproxy.Hang); err != nil {
			t.Fatal(err)
		}
		if _, err := head(t, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("hung endpoint: %v, want a deadline", err)
		}
	})
	t.Run("refuse", func(t *testing.T) {
		if err := proxy.SetMode(faultproxy.Refuse); err != nil {
			t.Fatal(err)
		}
		_, err := head(t, 2*time.Second)
		var httpErr rpc.HTTPError
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &httpErr) {
			t.Fatalf("refusing endpoint: %v, want a connection error", err)
		}
	})
	t.Run("back to pass", func(t *testing.T) {
		if err := proxy.SetMode(faultproxy.Pass); err != nil {
			t.Fatal(err)
		}
		if got, err := head(t, 5*time.Second); err != nil || got != 10 {
			t.Fatalf("head after recovery: %d, %v", got, err)
		}
	})
}
