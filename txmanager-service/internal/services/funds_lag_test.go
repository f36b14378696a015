package services_test

import (
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The funds check reads a signer's balance and nonce at one block of the endpoint that
// answers, and counts as still to pay the transactions at and above that nonce. So each
// transaction is counted once, in the balance or in the cost: when the endpoint trails the
// one whose receipts the database recorded (a fault proxy serving a real chain three blocks
// behind), and when a receipt is not recorded yet. The signer holds 5 ether and has spent 4
// of them in a mined transfer; 1 ether is left.
func TestFundsCheckCountsEachTransactionOnceWhateverTheEndpointTrails(t *testing.T) {
	t.Parallel()
	ether := func(tenths int64) *big.Int { return new(big.Int).Mul(big.NewInt(tenths), big.NewInt(params.Ether/10)) }
	tests := []struct {
		name string
		// lag is how many blocks behind the head the endpoint serves.
		lag uint64
		// recorded: the spend's receipt is in the database (the receipts stage read it from a
		// current endpoint).
		recorded    bool
		value       *big.Int
		wantRefused bool
	}{
		{name: "a trailing endpoint, the spend recorded mined: 2 ether refused", lag: 3, recorded: true, value: ether(20), wantRefused: true},
		{name: "a trailing endpoint, the spend recorded mined: half an ether admitted", lag: 3, recorded: true, value: ether(5)},
		{name: "a trailing endpoint, the spend not recorded: 2 ether refused", lag: 3, value: ether(20), wantRefused: true},
		{name: "a current endpoint, the spend not recorded yet: half an ether admitted", value: ether(5)},
		{name: "a current endpoint, the spend not recorded yet: 2 ether refused", value: ether(20), wantRefused: true},
		{name: "a current endpoint, the spend recorded mined: half an ether admitted", recorded: true, value: ether(5)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			pool := testsupport.MigratedPool(t)
			sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, Balance: ether(50), HTTPAddr: "127.0.0.1:0"})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = sim.Close() })
			key, signer := sim.DevKeys()[0], sim.DevAddresses()[0]

			// The spend: 4 ether at nonce 0, mined in block 1, with blocks 2 and 3 on top.
			head, err := sim.Backend().Client().HeaderByNumber(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(2)), big.NewInt(params.GWei))
			to := common.HexToAddress("0x00000000000000000000000000000000000000f0")
			spend, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(1337)), &types.DynamicFeeTx{
				ChainID: big.NewInt(1337), Nonce: 0, GasTipCap: big.NewInt(params.GWei), GasFeeCap: feeCap, Gas: 21000, To: &to, Value: ether(40),
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := sim.Backend().Client().SendTransaction(ctx, spend); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				sim.Commit()
			}
			receipt, err := sim.Backend().Client().TransactionReceipt(ctx, spend.Hash())
			if err != nil || receipt.BlockNumber.Uint64() != 1 {
				t.Fatalf("the spend's receipt: %v, %v; want it in block 1", receipt, err)
			}
			payload := `{"to":"` + to.Hex() + `","value":"` + ether(40).String() + `","gasLimit":21000,"maxFeePerGas":"` + feeCap.String() + `"}`
			if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, tx_hash, state, sub_state, fencing_token)
				VALUES (1337, $1, $2, '\x00', 0, $3, $4, 'TRACKING', 'SUBMITTED', 1)`, uuid.New(), signer.Hex(), payload, spend.Hash().Hex()); err != nil {
				t.Fatal(err)
			}
			if tt.recorded {
				if _, err := pool.Exec(ctx, `UPDATE managed_tx SET block_number = 1, block_hash = $2, receipt = '{}' WHERE signer = $1`, signer.Hex(), receipt.BlockHash.Hex()); err != nil {
					t.Fatal(err)
				}
			}

			proxy, err := faultproxy.Start(sim.HTTPEndpoint())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			proxy.SetLag(tt.lag, false)
			if err := proxy.SetMode(faultproxy.Lag); err != nil {
				t.Fatal(err)
			}
			endpoint, err := chain.DialRPC(ctx, proxy.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(endpoint.Close)
			guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: time.Minute, Fees: services.FeePolicy{BumpPercent: 12, BaseFeeMultiplier: 2}},
				endpoint, repositories.NewFundsRepository(pool, testsupport.TestChain()), &steppedClock{now: time.Now()}, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			_, err = guard.Reserve(ctx, signer, signer.Hex(), domain.Intent{To: &to, Value: tt.value}, 21000)
			switch {
			case tt.wantRefused && !errors.Is(err, domain.ErrInsufficientFunds):
				t.Fatalf("a create of %s wei with 1 ether left: %v, want INSUFFICIENT_FUNDS", tt.value, err)
			case !tt.wantRefused && err != nil:
				t.Fatalf("a create of %s wei with 1 ether left: %v, want it admitted", tt.value, err)
			}
		})
	}
}
