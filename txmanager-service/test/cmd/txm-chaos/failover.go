package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// runFailover is check 3 of docs/design.md#how-the-promises-are-checked, step by step and deterministic: node A owns a signer
// and is frozen (SIGSTOP) in the middle of a broadcast for longer than its lease; node B
// takes the signer over (token + 1) and drives every transaction to a final state; when A
// resumes, the writes it was about to make are FENCED, and nothing carrying A's token is
// written after B's takeover.
func runFailover(ctx context.Context, env *runEnv) ([]row, error) {
	db, err := env.freshDatabase(ctx, "failover")
	if err != nil {
		return nil, err
	}
	defer env.dropDatabase(ctx, db)
	signer := env.failoverKey
	signerAddr := e2e.Address(signer)
	c, err := startCluster(ctx, clusterOptions{
		bin: env.serviceBin, dir: env.dir("failover"), dsn: db.DSN, adminDSN: env.pg.AdminDSN,
		chains: env.chains[:1], signers: []*ecdsa.PrivateKey{signer}, count: 2,
		extra: map[string]any{"routing.mode": "basic", "resubmit.interval": "3s"},
	})
	if err != nil {
		return nil, err
	}
	defer c.stop()
	nodeA, nodeB := c.nodes[0], c.nodes[1]
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))

	clientA, clientB := c.client(nodeA), c.client(nodeB)
	create := func(client *e2e.Client, n int) error {
		for i := range n {
			req := &v1.CreateTxRequest{Signer: signerAddr.Hex(), To: e2e.Recipient().Hex(), Value: fmt.Sprint(i + 1), GasLimit: 21_000}
			if _, err := client.CreateTx(ctx, req); err != nil {
				return err
			}
		}
		return nil
	}
	// 1. A owns the signer and gets 3 transactions through.
	if err := create(clientA, 3); err != nil {
		return nil, fmt.Errorf("creates on node A: %w", err)
	}
	var tokenA int64
	if err := conn.QueryRow(ctx, "SELECT fencing_token FROM signer_lease WHERE signer = $1 AND split_part(owner_node, '#', 1) = $2", signerAddr.Hex(), nodeA.name).Scan(&tokenA); err != nil {
		return nil, fmt.Errorf("node A's lease: %w", err)
	}
	// 2. A's next broadcasts stall (the node takes them, the answers are held), and A is
	// frozen while it waits for them.
	nodeA.holdBroadcasts(6 * time.Second)
	if err := create(clientA, 3); err != nil {
		return nil, fmt.Errorf("creates on node A: %w", err)
	}
	if err := waitUntil(ctx, 20*time.Second, func() bool { return nodeA.heldBroadcasts() > 0 }); err != nil {
		return nil, fmt.Errorf("node A never broadcast: %w", err)
	}
	if err := c.pause(nodeA); err != nil {
		return nil, err
	}
	pausedAt := time.Now()
	// 3. B takes over once A's lease has lapsed (its adopt loop sees the open transactions)
	// and creates more.
	var tokenB int64
	var takenOver time.Time
	if err := waitUntil(ctx, 20*time.Second, func() bool {
		err := conn.QueryRow(ctx, "SELECT fencing_token, acquired_at FROM signer_lease WHERE signer = $1 AND split_part(owner_node, '#', 1) = $2",
			signerAddr.Hex(), nodeB.name).Scan(&tokenB, &takenOver)
		return err == nil
	}); err != nil {
		return nil, fmt.Errorf("node B never took the signer over: %w", err)
	}
	if err := create(clientB, 3); err != nil {
		return nil, fmt.Errorf("creates on B: %w", err)
	}
	// 4. A resumes after well over its lease: its held broadcasts answer and everything it
	// then writes must be fenced.
	sleep(ctx, time.Until(pausedAt.Add(7*time.Second)))
	if err := c.resume(nodeA); err != nil {
		return nil, err
	}
	nodeA.holdBroadcasts(0)
	open, err := waitFinal(ctx, conn, 2*time.Minute)
	if err != nil {
		return nil, err
	}
	// A's held broadcasts come back as it resumes; give it a moment to try its writes. The
	// counter is a series per chain (chain_id) next to an unlabelled one kept at zero, so
	// the count is their sum.
	fencedA := 0
	_ = waitUntil(ctx, 15*time.Second, func() bool {
		var metrics map[string]float64
		metrics, err = scrapeMetrics(ctx, c.url(nodeA)+"/metrics")
		fencedA = int(metrics["lease_fenced_total"])
		return err == nil && fencedA > 0
	})
	if err != nil {
		return nil, err
	}
	var lateWrites, lateAttempts, total, ownedByB int
	_ = conn.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE fencing_token = $1 AND updated_at >= $2", tokenA, takenOver).Scan(&lateWrites)
	_ = conn.QueryRow(ctx, "SELECT count(*) FROM tx_attempt WHERE fencing_token = $1 AND created_at >= $2", tokenA, takenOver).Scan(&lateAttempts)
	_ = conn.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE fencing_token = $1) FROM managed_tx", tokenB).Scan(&total, &ownedByB)
	onChain, err := chainNonce(ctx, env.chains[0].RPCURL, signerAddr)
	if err != nil {
		return nil, err
	}
	return []row{
		{"fencing token increase at takeover (B minus A)", int(tokenB - tokenA), "= 1"},
		{"A's broadcasts frozen mid-flight", int(nodeA.heldBroadcasts()), "> 0"},
		{"A paused past its lease (ms)", int(time.Since(pausedAt).Milliseconds()), ""},
		{"A's fenced writes after resuming (lease_fenced_total)", fencedA, "> 0"},
		{"rows with A's token written after B's takeover", lateWrites, "0"},
		{"attempts with A's token after B's takeover", lateAttempts, "0"},
		{"transactions (all final, last written by B)", ownedByB, fmt.Sprintf("= %d", total)},
		{"transactions not final", open, "0"},
		{"signer's on-chain nonce", int(onChain), fmt.Sprintf("= %d", total)},
	}, nil
}

func waitUntil(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

func chainNonce(ctx context.Context, url string, addr common.Address) (uint64, error) {
	eth, err := ethclient.DialContext(ctx, url)
	if err != nil {
		return 0, err
	}
	defer eth.Close()
	return eth.NonceAt(ctx, addr, nil)
}
