package services_test

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// fundsChain answers only what the funds guard asks; every other Chain method is absent.
type fundsChain struct {
	services.Chain
	balance *big.Int
	reads   int
}

func (c *fundsChain) BalanceAt(context.Context, common.Address) (*big.Int, error) {
	c.reads++
	return new(big.Int).Set(c.balance), nil
}

func (c *fundsChain) SuggestFees(context.Context) (services.FeeSuggestion, error) {
	return services.FeeSuggestion{BaseFee: big.NewInt(10), TipCap: big.NewInt(1)}, nil
}

type fixedCost struct{ cost *big.Int }

func (f fixedCost) UnminedCost(context.Context, string, *big.Int) (*big.Int, error) {
	return new(big.Int).Set(f.cost), nil
}

type steppedClock struct{ now time.Time }

func (c *steppedClock) Now() time.Time { return c.now }

// Fee cap for intents without their own: 2 x base fee 10 + tip 1 = 21 wei per gas.
func TestFundsGuardReserve(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	transfer := func(value int64) domain.Intent { return domain.Intent{Value: big.NewInt(value)} }
	tests := []struct {
		name      string
		balance   int64
		committed int64
		intents   []domain.Intent // reserved one after another, gas limit 1000 each
		admitted  int             // how many pass before the first refusal
	}{
		{"exactly affordable", 21_000 + 5, 0, []domain.Intent{transfer(5)}, 1},
		{"one wei short", 21_000 + 4, 0, []domain.Intent{transfer(5)}, 0},
		{"unfinished transactions count", 100_000, 60_000, []domain.Intent{transfer(0), transfer(0)}, 1},
		{"admitted creates count before their rows exist", 3 * 21_000, 0, []domain.Intent{transfer(0), transfer(0), transfer(0), transfer(0)}, 3},
		{"the intent's own fee cap prices its gas", 1_000, 0, []domain.Intent{{Value: big.NewInt(0), MaxFeePerGas: big.NewInt(1)}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
			chain := &fundsChain{balance: big.NewInt(tc.balance)}
			guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second},
				chain, fixedCost{big.NewInt(tc.committed)}, clock, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			admitted := 0
			for _, intent := range tc.intents {
				_, err := guard.Reserve(context.Background(), signer, signer.Hex(), intent, 1000)
				if err != nil {
					if !errors.Is(err, domain.ErrInsufficientFunds) {
						t.Fatalf("refusal %v does not match ErrInsufficientFunds", err)
					}
					break
				}
				admitted++
			}
			if admitted != tc.admitted {
				t.Fatalf("admitted %d of %d, want %d", admitted, len(tc.intents), tc.admitted)
			}
		})
	}
}

func TestFundsGuardReleaseAndRefresh(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	clock := &steppedClock{now: time.Unix(1_700_000_000, 0)}
	chain := &fundsChain{balance: big.NewInt(21_000)}
	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: 2 * time.Second}, chain, fixedCost{new(big.Int)}, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	intent := domain.Intent{Value: big.NewInt(0)}
	first, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); !errors.Is(err, domain.ErrInsufficientFunds) {
		t.Fatalf("second reservation on a balance for one: %v, want ErrInsufficientFunds", err)
	}
	// A create that failed gives its share back.
	first.Release()
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); err != nil {
		t.Fatalf("after release: %v", err)
	}
	if chain.reads != 1 {
		t.Fatalf("balance read %d times within the cache period, want 1", chain.reads)
	}
	// Funded later: an old snapshot is not trusted for a refusal; the balance is read again.
	chain.balance = big.NewInt(1_000_000)
	clock.now = clock.now.Add(time.Second)
	if _, err := guard.Reserve(ctx, signer, signer.Hex(), intent, 1000); err != nil {
		t.Fatalf("after funding: %v", err)
	}
	if chain.reads != 2 {
		t.Fatalf("balance read %d times, want 2 (one reload before refusing)", chain.reads)
	}
	// With the check off everything is admitted and nothing is read.
	off, err := services.NewFundsGuard(services.FundsConfig{}, chain, fixedCost{new(big.Int)}, clock, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	if r, err := off.Reserve(ctx, signer, signer.Hex(), domain.Intent{Value: big.NewInt(1 << 62)}, 1000); err != nil || r != nil {
		t.Fatalf("check off: %v, %v", r, err)
	}
}
