package services_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// resolverCall is one transaction the admin use case asked the stuck stage to resolve.
type resolverCall struct {
	id     uuid.UUID
	action domain.ResolutionAction
	reason string
}

// recordingResolver stands for the pipeline's stuck stage (outside this package): it
// records what it was asked and answers the action, NOOP when the hook decides.
type recordingResolver struct{ calls []resolverCall }

func (r *recordingResolver) ResolveTx(_ context.Context, id uuid.UUID, action domain.ResolutionAction, reason string) (domain.ResolutionAction, error) {
	r.calls = append(r.calls, resolverCall{id, action, reason})
	if action == "" {
		return domain.ActionNoop, nil
	}
	return action, nil
}

// signerList is the signer directory of the tests: these signers, every one accepted.
type signerList []common.Address

func (l signerList) Accepts(common.Address) error { return nil }
func (l signerList) Addresses() []common.Address  { return append([]common.Address(nil), l...) }

// adminFixture is the admin use case on a real database, with one node holding the
// signer's lease, the embedded chain (its only funded key is the signer), and the stuck
// stage recorded.
type adminFixture struct {
	pool     *pgxpool.Pool
	sim      *chain.SimulatedChain
	key      *ecdsa.PrivateKey
	signer   common.Address
	node     *testsupport.WriterNode
	nodes    *services.NodeRegistry
	resolver *recordingResolver
	admin    *services.AdminUseCase
}

func newAdminFixture(t *testing.T, cfg services.AdminConfig) *adminFixture {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	key := sim.DevKeys()[0]
	f := &adminFixture{pool: pool, sim: sim, key: key, signer: crypto.PubkeyToAddress(key.PublicKey), resolver: &recordingResolver{},
		node: testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})}
	f.nodes = services.NewNodeRegistry(services.NodeConfig{Self: services.NodeInfo{ID: "node-a", Incarnation: "one", StartedAt: time.Now().UTC()}, Timeout: time.Minute},
		repositories.NewNodeRepository(pool), testLogger())
	f.admin = services.NewAdminUseCase(cfg, f.resolver, sim, repositories.NewAdminRepository(pool, testsupport.TestChain()), f.nodes,
		signerList{testsupport.SignerAddress(2), f.signer, testsupport.SignerAddress(1)})
	return f
}

// A resolution is validated before the stuck stage hears of it; the action is the
// operator's, or the hook's when none is named.
func TestAdminResolveTxValidatesTheRequest(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, services.AdminConfig{})
	id := uuid.New()
	tests := []struct {
		name, txID, action, reason string
		wantErr                    bool
		want                       domain.ResolutionAction
	}{
		{name: "not a UUID", txID: "42", action: "CANCEL", wantErr: true},
		{name: "a UUID's length but not one", txID: strings.Repeat("z", 36), action: "CANCEL", wantErr: true},
		{name: "an action nobody knows", txID: id.String(), action: "PRAY", wantErr: true},
		{name: "a reason with control characters", txID: id.String(), action: "CANCEL", reason: "bad\x00reason", wantErr: true},
		{name: "a reason too long", txID: id.String(), action: "CANCEL", reason: strings.Repeat("r", 501), wantErr: true},
		{name: "an action in any case", txID: id.String(), action: " replace ", reason: "fee spike", want: domain.ActionReplace},
		{name: "no action: the hook decides", txID: id.String(), action: "  ", want: domain.ActionNoop},
	}
	for _, tc := range tests {
		before := len(f.resolver.calls)
		got, err := f.admin.ResolveTx(t.Context(), tc.txID, tc.action, tc.reason)
		if tc.wantErr {
			if !errors.Is(err, domain.ErrInvalidArgument) || len(f.resolver.calls) != before {
				t.Errorf("%s: %v (stage asked: %t), want INVALID_ARGUMENT before the stage is asked", tc.name, err, len(f.resolver.calls) != before)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
			continue
		}
		if last := f.resolver.calls[len(f.resolver.calls)-1]; last.id != id || last.reason != tc.reason {
			t.Errorf("%s: the stage was asked %+v", tc.name, last)
		}
	}
}

// An operator's signer status: the lease, the cursor and what waits, under the signer's
// checksummed address whatever case it was asked in; Signers reports every managed signer
// in address order.
func TestAdminSignerStatusAndSigners(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, services.AdminConfig{})
	if _, errs := testsupport.Results(t, f.node.Allocate(t, f.signer, 2)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	status, err := f.admin.SignerStatus(t.Context(), strings.ToLower(f.signer.Hex()))
	if err != nil {
		t.Fatal(err)
	}
	if status.Signer != f.signer.Hex() || status.Condition.Signer != f.signer.Hex() || status.LeaseOwner != "node-a" || !status.LeaseLive ||
		status.NextNonce != 2 || status.PendingDepth != 2 || status.Quarantined || status.Condition.Unsigned != 2 {
		t.Fatalf("status %+v, want node-a's live lease, cursor 2, two unsigned pending", status)
	}
	if _, err := f.admin.SignerStatus(t.Context(), "0x123"); !errors.Is(err, domain.ErrInvalidArgument) {
		t.Fatalf("status of a malformed address: %v, want INVALID_ARGUMENT", err)
	}

	all, err := f.admin.Signers(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, s := range all {
		order = append(order, s.Signer)
	}
	want := []string{testsupport.SignerAddress(1).Hex(), testsupport.SignerAddress(2).Hex(), f.signer.Hex()}
	if f.signer.Big().Cmp(testsupport.SignerAddress(1).Big()) < 0 {
		want = []string{f.signer.Hex(), testsupport.SignerAddress(1).Hex(), testsupport.SignerAddress(2).Hex()}
	}
	if fmt.Sprint(order) != fmt.Sprint(want) {
		t.Fatalf("signers %v, want %v (by address)", order, want)
	}
}

// Stuck transactions are listed, of one signer or all, within the page bounds.
func TestAdminListStuck(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, services.AdminConfig{})
	txs, errs := testsupport.Results(t, f.node.Allocate(t, f.signer, 2))
	if errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	if _, err := f.pool.Exec(t.Context(), "UPDATE managed_tx SET state = 'STUCK' WHERE tx_id = $1", txs[0].ID); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		signer  string
		limit   int
		want    int
		wantErr bool
	}{
		{name: "every signer, the default page", want: 1},
		{name: "one signer", signer: strings.ToLower(f.signer.Hex()), limit: 10, want: 1},
		{name: "another signer", signer: testsupport.SignerAddress(1).Hex(), limit: 10, want: 0},
		{name: "a malformed signer", signer: "0xnope", wantErr: true},
		{name: "a negative page", limit: -1, wantErr: true},
		{name: "a page beyond the bound", limit: 1001, wantErr: true},
	}
	for _, tc := range tests {
		got, err := f.admin.ListStuck(t.Context(), tc.signer, tc.limit)
		switch {
		case tc.wantErr && !errors.Is(err, domain.ErrInvalidArgument):
			t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, err)
		case !tc.wantErr && (err != nil || len(got) != tc.want):
			t.Errorf("%s: %d stuck (%v), want %d", tc.name, len(got), err, tc.want)
		case !tc.wantErr && tc.want == 1 && got[0].ID != txs[0].ID:
			t.Errorf("%s: listed %s, want the stuck %s", tc.name, got[0].ID, txs[0].ID)
		}
	}
}

// The node list is the registry's, alive or not.
func TestAdminListNodes(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, services.AdminConfig{})
	if err := f.nodes.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	nodes, err := f.admin.ListNodes(t.Context())
	if err != nil || len(nodes) != 1 || nodes[0].ID != "node-a" || !nodes[0].Alive {
		t.Fatalf("nodes %+v (%v), want node-a alive", nodes, err)
	}
}

// sendOwn sends count transfers with the signer's key outside the service (nonces from 0)
// and mines them.
func (f *adminFixture) sendOwn(t *testing.T, count int) []common.Hash {
	t.Helper()
	id := big.NewInt(chain.SimulatedChainID)
	hashes := make([]common.Hash, count)
	for nonce := range count {
		tx, err := types.SignNewTx(f.key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{ChainID: id, Nonce: uint64(nonce), Gas: 21_000, To: &f.signer,
			Value: big.NewInt(1), GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei)})
		if err != nil {
			t.Fatal(err)
		}
		raw, err := tx.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		if err := f.sim.SendRawTransaction(t.Context(), raw); err != nil {
			t.Fatal(err)
		}
		hashes[nonce] = tx.Hash()
	}
	deadline := time.Now().Add(5 * time.Second)
	for pending, _ := f.sim.PendingNonceAt(t.Context(), f.signer); pending < uint64(count); pending, _ = f.sim.PendingNonceAt(t.Context(), f.signer) {
		if time.Now().After(deadline) {
			t.Fatal("the sent transactions did not reach the pool")
		}
		time.Sleep(5 * time.Millisecond)
	}
	f.sim.Commit()
	return hashes
}

// quarantine records the signer quarantined over nonces dbNext..chainNext-1, as a check
// finding the chain ahead would, under node-a's lease.
func (f *adminFixture) quarantine(t *testing.T, dbNext, chainNext uint64) {
	t.Helper()
	lease, err := f.node.Leases.Acquire(t.Context(), f.signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := repositories.NewReconcileRepository(f.pool, testsupport.TestChain()).Quarantine(t.Context(), lease, dbNext, chainNext); err != nil || !ok {
		t.Fatalf("quarantine: %t, %v", ok, err)
	}
}

// recordRecovered writes the row recovery records at nonce for a transaction found on
// chain: adopted by requestID, or unclaimed when requestID is "".
func (f *adminFixture) recordRecovered(t *testing.T, nonce uint64, hash common.Hash, requestID string) {
	t.Helper()
	var id, unclaimed any
	if requestID != "" {
		id = requestID
	} else {
		unclaimed = time.Now().Add(time.Hour)
	}
	if _, err := f.pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, sub_state, tx_hash,
		fencing_token, recovered_at, unclaimed_until) VALUES (1337, $1, $2, $3, '\x00', $4, $5, 'TRACKING', 'SIGNED', $6, 1, now(), $7)`,
		uuid.New(), f.signer.Hex(), id, nonce, fmt.Sprintf(`{"to":%q,"value":"1","gasLimit":21000,"effectiveGasLimit":21000}`, f.signer.Hex()), hash.Hex(), unclaimed); err != nil {
		t.Fatal(err)
	}
}

// A quarantine is shown summarised in runs by what recovery made of each unknown nonce, and
// nonce by nonce on request, a page at a time: the recorded row where recovery recorded one,
// what the chain shows where it did not, nothing where neither knows a transaction.
func TestAdminGetQuarantineListsTheUnknownNonces(t *testing.T) {
	t.Parallel()
	f := newAdminFixture(t, services.AdminConfig{ScanBlocks: 64})
	hashes := f.sendOwn(t, 5) // nonces 0..4 on chain
	f.quarantine(t, 2, 6)     // the database knew nonces below 2; the chain is said to hold up to 5
	f.recordRecovered(t, 2, hashes[2], "")
	f.recordRecovered(t, 3, hashes[3], "order-3")

	never, err := f.admin.GetQuarantine(t.Context(), testsupport.SignerAddress(1).Hex(), 0, 0, true)
	if err != nil || never.Quarantined || !never.DetectedAt.IsZero() || never.Ranges != nil {
		t.Fatalf("a signer never quarantined: %+v (%v), want no record", never, err)
	}
	summary, err := f.admin.GetQuarantine(t.Context(), strings.ToLower(f.signer.Hex()), 0, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	wantRanges := []services.NonceRangeSummary{{Class: services.NonceClassUnclaimed, First: 2, Last: 2, Count: 1},
		{Class: services.NonceClassAdopted, First: 3, Last: 3, Count: 1}, {Class: services.NonceClassNotRecorded, First: 4, Last: 5, Count: 2}}
	if !summary.Quarantined || summary.Signer != f.signer.Hex() || fmt.Sprint(summary.Ranges) != fmt.Sprint(wantRanges) || summary.Unknown != nil {
		t.Fatalf("summary %+v, want quarantined with ranges %v and no nonce listed", summary, wantRanges)
	}

	type unknown struct {
		nonce            uint64
		hash             string // "" when neither recovery nor the chain shows one
		recovered        bool
		requestID        string
		unclaimedDefined bool
	}
	pages := []struct {
		name     string
		from     uint64
		limit    int
		want     []unknown
		nextFrom uint64
	}{
		{"a first page", 0, 3, []unknown{{2, hashes[2].Hex(), true, "", true}, {3, hashes[3].Hex(), true, "order-3", false}, {4, hashes[4].Hex(), false, "", false}}, 5},
		{"the last page", 5, 3, []unknown{{5, "", false, "", false}}, 0},
		{"no bound: every nonce", 0, 0, []unknown{{2, hashes[2].Hex(), true, "", true}, {3, hashes[3].Hex(), true, "order-3", false},
			{4, hashes[4].Hex(), false, "", false}, {5, "", false, "", false}}, 0},
	}
	for _, p := range pages {
		q, err := f.admin.GetQuarantine(t.Context(), f.signer.Hex(), p.from, p.limit, true)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		var got []unknown
		for _, u := range q.Unknown {
			g := unknown{nonce: u.Nonce, recovered: u.Recovered != nil}
			if u.Tx != nil {
				g.hash = u.Tx.Hash.Hex()
			}
			if u.Recovered != nil {
				g.requestID, g.unclaimedDefined = u.Recovered.RequestID, u.Recovered.UnclaimedUntil != nil
			}
			got = append(got, g)
		}
		if fmt.Sprint(got) != fmt.Sprint(p.want) || q.NextFromNonce != p.nextFrom {
			t.Fatalf("%s: %+v next %d, want %+v next %d", p.name, got, q.NextFromNonce, p.want, p.nextFrom)
		}
	}
}

// An operator's release is a request the signer's recovery carries out: the answer waits
// for it up to ReleaseWait and says how it ended, released or still recording; a signer
// that is not quarantined has nothing to release.
func TestAdminReleaseSignerWaitsForTheRecovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// recoveryReleases: the recovery carries the release out after this long (0: never,
		// within the wait).
		recoveryReleases time.Duration
		wantQuarantined  bool
	}{
		{"the recovery releases it within the wait", 200 * time.Millisecond, false},
		{"the recovery is still recording when the wait ends", 0, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const wait = 1500 * time.Millisecond
			f := newAdminFixture(t, services.AdminConfig{ReleaseWait: wait})
			ctx := domain.WithPrincipal(t.Context(), domain.Principal{ID: "operator-1", Admin: true})
			if _, err := f.admin.ReleaseSigner(ctx, f.signer.Hex(), "looked"); !errors.Is(err, domain.ErrNotFound) {
				t.Fatalf("releasing a signer that is not quarantined: %v, want NOT_FOUND", err)
			}
			if _, err := f.admin.ReleaseSigner(ctx, f.signer.Hex(), "bad\x07note"); !errors.Is(err, domain.ErrInvalidArgument) {
				t.Fatalf("a note with control characters: %v, want INVALID_ARGUMENT", err)
			}
			f.quarantine(t, 0, 3)
			if tc.recoveryReleases > 0 {
				go func() {
					time.Sleep(tc.recoveryReleases)
					_, _ = f.pool.Exec(context.Background(), "UPDATE signer_quarantine SET released_at = now() WHERE signer = $1 AND release_requested_at IS NOT NULL", f.signer.Hex())
				}()
			}
			started := time.Now()
			q, err := f.admin.ReleaseSigner(ctx, f.signer.Hex(), "checked the unknown nonces")
			took := time.Since(started)
			if err != nil {
				t.Fatal(err)
			}
			if q.Quarantined != tc.wantQuarantined || q.ReleaseRequestedAt == nil || q.ReleaseRequestedBy != "operator-1" {
				t.Fatalf("answer %+v, want quarantined %t with operator-1's request on record", q, tc.wantQuarantined)
			}
			if tc.wantQuarantined && took < wait {
				t.Fatalf("answered after %s, before the wait of %s ended", took, wait)
			}
			if !tc.wantQuarantined && took >= wait {
				t.Fatalf("answered after %s: the release was not seen as it happened", took)
			}
		})
	}
}
