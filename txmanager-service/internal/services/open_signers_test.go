package services_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// grantingLeases grants every lease it is asked for to the asker, except those another
// node holds.
type grantingLeases struct {
	foreign []string
	asked   []string
}

func (g *grantingLeases) AcquireOrRenew(_ context.Context, signer, node string, duration, _ time.Duration) (services.LeaseGrant, error) {
	g.asked = append(g.asked, signer)
	now := time.Now()
	if slices.Contains(g.foreign, signer) {
		return services.LeaseGrant{Signer: signer, Owner: "peer", Token: 3, ExpiresAt: now.Add(duration), DBNow: now}, nil
	}
	return services.LeaseGrant{Signer: signer, Owner: node, Token: 1, ExpiresAt: now.Add(duration), DBNow: now, Acquired: true}, nil
}
func (g *grantingLeases) Release(context.Context, domain.Lease) error { return nil }
func (g *grantingLeases) Renew(context.Context, string, []string, time.Duration) ([]services.LeaseGrant, error) {
	return nil, nil
}

type openSigners struct{ open []services.OpenSigner }

func (o openSigners) ListOpenSigners(context.Context) ([]services.OpenSigner, error) {
	return o.open, nil
}
func (o openSigners) OldestPendingAges(context.Context, []string) (map[string]float64, error) {
	return nil, nil
}

// A signer with open transactions whose lease nobody holds is taken, so some node drives
// it; one a live peer holds is left to the peer, one this node holds is kept, and one this
// node holds no key for is left to a node that can sign for it.
func TestOpenSignersAreAdopted(t *testing.T) {
	const (
		orphan    = "0x00000000000000000000000000000000000000a1"
		held      = "0x00000000000000000000000000000000000000a2"
		peer      = "0x00000000000000000000000000000000000000a3"
		contested = "0x00000000000000000000000000000000000000a4"
		keyless   = "0x00000000000000000000000000000000000000a5"
	)
	store := &grantingLeases{foreign: []string{contested}}
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a", Duration: 10 * time.Second, RenewInterval: 3 * time.Second, IdleTimeout: time.Minute},
		store, services.SystemClock{}, telemetry.Noop(), log.DefaultLogger)
	if _, err := leases.Acquire(t.Context(), held); err != nil {
		t.Fatal(err)
	}
	store.asked = nil
	keys := &rosterDirectory{held: map[common.Address]bool{}}
	for _, s := range []string{orphan, held, peer, contested} {
		keys.held[common.HexToAddress(s)] = true
	}
	o, err := services.NewOpenSigners(openSigners{open: []services.OpenSigner{
		{Signer: orphan}, // nobody drives it
		{Signer: held, Owner: "node-a", LeaseLive: true}, // ours already
		{Signer: peer, Owner: "node-b", LeaseLive: true}, // a live peer drives it
		{Signer: contested, Owner: "node-b"},             // expired, but a peer took it meanwhile
		{Signer: keyless},                                // nobody drives it, but this node cannot sign for it
	}}, leases, keys, telemetry.Noop(), log.DefaultLogger)
	if err != nil {
		t.Fatal(err)
	}
	acquired, err := o.Adopt(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if acquired != 1 {
		t.Errorf("acquired %d signers, want 1 (the orphan)", acquired)
	}
	if !slices.Equal(store.asked, []string{orphan, contested}) {
		t.Errorf("asked the database for %v, want the orphan and the expired one only", store.asked)
	}
	got := leases.HeldSigners()
	slices.Sort(got)
	if !slices.Equal(got, []string{orphan, held}) {
		t.Errorf("holds %v, want %s and %s", got, orphan, held)
	}
}
