package clef_test

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/test/clef"
)

// Clef starts headless with its rules in force: it lists exactly its accounts without a
// human approving, and stops cleanly on an interrupt.
func TestClefServesItsAccountsHeadless(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, err := clef.FindInRepo()
	if err != nil {
		t.Fatal(err)
	}
	k1, _ := crypto.GenerateKey()
	k2, _ := crypto.GenerateKey()
	c, err := clef.Start(ctx, clef.Options{Bin: bin, ChainID: big.NewInt(1337), Keys: []*ecdsa.PrivateKey{k1, k2}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := rpc.DialContext(ctx, c.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var listed []common.Address
	callCtx, callCancel := context.WithTimeout(ctx, 10*time.Second)
	defer callCancel()
	if err := client.CallContext(callCtx, &listed, "account_list"); err != nil {
		t.Fatalf("account_list: %v; clef log:\n%s", err, c.LogTail(40))
	}
	want := []common.Address{crypto.PubkeyToAddress(k1.PublicKey), crypto.PubkeyToAddress(k2.PublicKey)}
	slices.SortFunc(listed, common.Address.Cmp)
	slices.SortFunc(want, common.Address.Cmp)
	if !slices.Equal(listed, want) {
		t.Fatalf("account_list = %v, want %v", listed, want)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
