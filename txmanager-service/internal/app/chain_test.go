package app

import (
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

func TestProductionRefusesSignersWithPublicKeys(t *testing.T) {
	devKey, err := chain.DevKey(3)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		addr common.Address
		want string // "" = accepted
	}{
		{"our development account", crypto.PubkeyToAddress(devKey.PublicKey), "txmanager development account 3"},
		{"Hardhat's first account", common.HexToAddress("0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"), "Hardhat/Anvil default account 0"},
		{"a fresh key", crypto.PubkeyToAddress(fresh.PublicKey), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := refusePublicKeys([]common.Address{tc.addr})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
}
