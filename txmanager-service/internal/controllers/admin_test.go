package controllers_test

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/google/uuid"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Every admin call is refused before it touches anything unless the caller has the admin
// grant: without credentials 401, with a client's credentials 403.
func TestAdminCallsNeedTheAdminGrant(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	node := env.node(t, "node-a", nodeOptions{})
	signer := env.dev[0].Hex()
	calls := map[string]func(ctx context.Context) error{
		"ResolveTx": func(ctx context.Context) error {
			_, err := node.admin.ResolveTx(ctx, &v1.ResolveTxRequest{TxId: uuid.NewString()})
			return err
		},
		"GetSignerStatus": func(ctx context.Context) error {
			_, err := node.admin.GetSignerStatus(ctx, &v1.GetSignerStatusRequest{Signer: signer})
			return err
		},
		"ListSigners": func(ctx context.Context) error {
			_, err := node.admin.ListSigners(ctx, &v1.ListSignersRequest{})
			return err
		},
		"ListStuck": func(ctx context.Context) error {
			_, err := node.admin.ListStuck(ctx, &v1.ListStuckRequest{})
			return err
		},
		"ListNodes": func(ctx context.Context) error {
			_, err := node.admin.ListNodes(ctx, &v1.ListNodesRequest{})
			return err
		},
		"GetQuarantine": func(ctx context.Context) error {
			_, err := node.admin.GetQuarantine(ctx, &v1.GetQuarantineRequest{Signer: signer})
			return err
		},
		"ReleaseSigner": func(ctx context.Context) error {
			_, err := node.admin.ReleaseSigner(ctx, &v1.ReleaseSignerRequest{Signer: signer})
			return err
		},
		"AddSigner": func(ctx context.Context) error {
			_, err := node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: signer, Source: "keystore"})
			return err
		},
		"RetireSigner": func(ctx context.Context) error {
			_, err := node.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: signer})
			return err
		},
		"ListRoster": func(ctx context.Context) error {
			_, err := node.admin.ListRoster(ctx, &v1.ListRosterRequest{})
			return err
		},
	}
	callers := []struct {
		name   string
		ctx    context.Context
		status int
		reason v1.ErrorReason
	}{
		{"no credentials", context.Background(), http.StatusUnauthorized, v1.ErrorReason_UNAUTHENTICATED},
		{"a client granted every signer", as(anyCaller), http.StatusForbidden, v1.ErrorReason_PERMISSION_DENIED},
	}
	for method, call := range calls {
		for _, c := range callers {
			t.Run(method+"/"+c.name, func(t *testing.T) {
				wantAPIError(t, call(c.ctx), c.status, c.reason, "")
			})
		}
	}
}

// An operator resolves a transaction with an action of their choosing or the hook's, and
// gets the transaction back as it then stands.
func TestResolveTxRunsTheResolutionOnTheTransactionsChain(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	node := env.node(t, "node-a", nodeOptions{})
	created, err := node.tx.CreateTx(as(anyCaller), &v1.CreateTxRequest{Signer: dev[0].Hex(), To: dev[1].Hex(), GasLimit: 21000})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetTx().GetTxId()
	tests := []struct {
		name       string
		req        *v1.ResolveTxRequest
		status     int
		reason     v1.ErrorReason
		field      string
		wantAction string
		wantCall   string
	}{
		{name: "the operator's action", req: &v1.ResolveTxRequest{TxId: id, Action: "replace", Reason: "fee spike"},
			wantAction: "REPLACE", wantCall: id + ":REPLACE:fee spike"},
		{name: "the hook decides", req: &v1.ResolveTxRequest{TxId: id}, wantAction: "CANCEL", wantCall: id + "::"},
		{name: "an action that does not exist", req: &v1.ResolveTxRequest{TxId: id, Action: "burn"},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "action"},
		{name: "a reason with control characters", req: &v1.ResolveTxRequest{TxId: id, Reason: "a\x00b"},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "reason"},
		{name: "an unknown transaction", req: &v1.ResolveTxRequest{TxId: uuid.NewString()}, status: http.StatusNotFound, reason: v1.ErrorReason_NOT_FOUND},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := len(node.resolver.calls)
			resp, err := node.admin.ResolveTx(as(adminCaller), tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				if len(node.resolver.calls) != before {
					t.Errorf("a refused resolution reached the resolver: %v", node.resolver.calls[before:])
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetTxId() != id || resp.GetAction() != tt.wantAction || resp.GetTx().GetTxId() != id {
				t.Errorf("answered %v, want tx %s action %s", resp, id, tt.wantAction)
			}
			if calls := node.resolver.calls[before:]; len(calls) != 1 || calls[0] != tt.wantCall {
				t.Errorf("resolver calls %v, want [%s]", calls, tt.wantCall)
			}
		})
	}
}

// The signer views answer what the database holds: the lease, the cursor, the backlog,
// the stuck transactions and the nodes, for one signer or every one this node holds.
func TestSignerViewsReadTheDatabase(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	node := env.node(t, "node-a", nodeOptions{})
	created, err := node.tx.CreateTx(as(anyCaller), &v1.CreateTxRequest{Signer: dev[0].Hex(), To: dev[1].Hex(), GasLimit: 21000})
	if err != nil {
		t.Fatal(err)
	}
	if err := node.nodes.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	// The stuck stage would mark it so after its resubmissions ran out; here it is marked
	// directly so the listing has one to show.
	if _, err := env.pool.Exec(t.Context(), "UPDATE managed_tx SET state = 'STUCK', sub_state = 'NOOP' WHERE tx_id = $1", created.GetTx().GetTxId()); err != nil {
		t.Fatal(err)
	}
	ctx := as(adminCaller)
	tests := []struct {
		name   string
		call   func() (any, error)
		status int
		field  string
		check  func(t *testing.T, resp any)
	}{
		{name: "a signer's status", call: func() (any, error) {
			return node.admin.GetSignerStatus(ctx, &v1.GetSignerStatusRequest{Signer: strings.ToLower(dev[0].Hex())})
		}, check: func(t *testing.T, resp any) {
			s := resp.(*v1.SignerStatus)
			got := fmt.Sprint(s.GetChainId(), s.GetSigner(), s.GetLeaseOwner(), s.GetLeaseLive(), s.GetNextNonce(), s.GetPendingDepth(), s.GetStuckCount(), s.GetQuarantined(), s.GetRecovering(), s.GetServing())
			want := fmt.Sprint(testChainID, dev[0].Hex(), "node-a#test", true, 1, 1, 1, false, false, true)
			if got != want {
				t.Errorf("status %s, want %s", got, want)
			}
			if s.GetFencingToken() == 0 || !s.GetLeaseExpiresAt().AsTime().After(time.Now()) || s.GetSigningFailingSince() != nil {
				t.Errorf("lease token %d expiring %v, failing since %v: want a live lease and a signing key", s.GetFencingToken(), s.GetLeaseExpiresAt().AsTime(), s.GetSigningFailingSince())
			}
		}},
		{name: "a status of a signer that does not parse", status: http.StatusBadRequest, field: "signer", call: func() (any, error) {
			return node.admin.GetSignerStatus(ctx, &v1.GetSignerStatusRequest{Signer: "0x12"})
		}},
		{name: "a status on a chain not served here", status: http.StatusBadRequest, field: "chainId", call: func() (any, error) {
			return node.admin.GetSignerStatus(ctx, &v1.GetSignerStatusRequest{ChainId: 99, Signer: dev[0].Hex()})
		}},
		{name: "every signer held, ordered by address", call: func() (any, error) {
			return node.admin.ListSigners(ctx, &v1.ListSignersRequest{ChainId: testChainID})
		}, check: func(t *testing.T, resp any) {
			var got []string
			for _, s := range resp.(*v1.ListSignersResponse).GetSigners() {
				got = append(got, s.GetSigner())
			}
			want := make([]string, len(dev))
			for i, a := range dev {
				want[i] = a.Hex()
			}
			slices.SortFunc(want, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("signers %v, want %v", got, want)
			}
		}},
		{name: "signers of a chain not served here", status: http.StatusBadRequest, field: "chainId", call: func() (any, error) {
			return node.admin.ListSigners(ctx, &v1.ListSignersRequest{ChainId: 99})
		}},
		{name: "the stuck transactions", call: func() (any, error) {
			return node.admin.ListStuck(ctx, &v1.ListStuckRequest{Signer: dev[0].Hex()})
		}, check: func(t *testing.T, resp any) {
			txs := resp.(*v1.ListStuckResponse).GetTxs()
			if len(txs) != 1 || txs[0].GetTxId() != created.GetTx().GetTxId() || txs[0].GetState() != "STUCK" || txs[0].GetSubState() != "NOOP" {
				t.Errorf("stuck %v, want the one marked stuck", txs)
			}
		}},
		{name: "another signer has none stuck", call: func() (any, error) {
			return node.admin.ListStuck(ctx, &v1.ListStuckRequest{Signer: dev[1].Hex()})
		}, check: func(t *testing.T, resp any) {
			if txs := resp.(*v1.ListStuckResponse).GetTxs(); len(txs) != 0 {
				t.Errorf("stuck %v, want none", txs)
			}
		}},
		{name: "a stuck page too large", status: http.StatusBadRequest, field: "limit", call: func() (any, error) {
			return node.admin.ListStuck(ctx, &v1.ListStuckRequest{Limit: 5000})
		}},
		{name: "the nodes", call: func() (any, error) {
			return node.admin.ListNodes(ctx, &v1.ListNodesRequest{})
		}, check: func(t *testing.T, resp any) {
			nodes := resp.(*v1.ListNodesResponse).GetNodes()
			if len(nodes) != 1 {
				t.Fatalf("nodes %v, want this one", nodes)
			}
			n := nodes[0]
			got := fmt.Sprint(n.GetNodeId(), n.GetIncarnation(), n.GetGrpcAddr(), n.GetHttpAddr(), n.GetVersion(), n.GetAlive(), n.GetLeases())
			if want := fmt.Sprint("node-a", "test", "127.0.0.1:1", "127.0.0.1:2", "test", true, 1); got != want {
				t.Errorf("node %s, want %s", got, want)
			}
			if n.GetStartedAt() == nil || n.GetHeartbeatAt() == nil {
				t.Errorf("node %v without its times", n)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := tt.call()
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, v1.ErrorReason_INVALID_ARGUMENT, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, resp)
		})
	}
}

// A quarantine is answered with its unknown nonces summarised, and on request one by one:
// what recovery recorded there (adopted or still adoptable) or, where nothing was recorded,
// what the chain shows. A release answers the quarantine as it ended.
func TestQuarantineShowsTheUnknownNoncesAndTheRelease(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	quarantined := dev[2]
	detected := time.Unix(1_700_000_000, 0).UTC()
	unclaimedUntil := detected.Add(time.Hour)
	adoptedHash, unclaimedHash := common.HexToHash("0xa1"), common.HexToHash("0xb2")
	adoptedID, unclaimedID := uuid.New(), uuid.New()
	store := &quarantineStore{
		AdminStore: nil,
		record: services.Quarantine{Signer: quarantined.Hex(), Quarantined: true, DBNextNonce: 5, ChainNonce: 8, DetectedAt: detected, DetectedBy: "node-a",
			RecordedTo: 6, Recorded: 2},
		ranges: []services.NonceRangeSummary{
			{Class: services.NonceClassAdopted, First: 5, Last: 5, Count: 1},
			{Class: services.NonceClassNotRecorded, First: 6, Last: 6, Count: 1},
			{Class: services.NonceClassUnclaimed, First: 7, Last: 7, Count: 1},
		},
		recovered: map[uint64]services.RecoveredRow{
			5: {TxID: adoptedID, RequestID: "order-5", Tx: services.SentTx{Hash: adoptedHash, Nonce: 5, To: &dev[1], Value: big.NewInt(7), Data: []byte{1, 2}, Gas: 21000, BlockNumber: 12}},
			7: {TxID: unclaimedID, UnclaimedUntil: &unclaimedUntil, Tx: services.SentTx{Hash: unclaimedHash, Nonce: 7, Value: big.NewInt(0), Gas: 90000}},
		},
		releaseCarriedOut: true,
	}
	node := env.node(t, "node-a", nodeOptions{adminStore: store})
	ctx := as(adminCaller)
	summary := func(q *v1.Quarantine) string {
		var ranges []string
		for _, r := range q.GetRanges() {
			ranges = append(ranges, fmt.Sprintf("%s:%d-%d/%d", r.GetClass(), r.GetFirstNonce(), r.GetLastNonce(), r.GetCount()))
		}
		return fmt.Sprint(q.GetSigner(), q.GetQuarantined(), q.GetDbNextNonce(), q.GetChainNonce(), q.GetDetectedBy(), q.GetRecordedTo(), q.GetRecorded(), ranges)
	}
	unknown := func(q *v1.Quarantine) []string {
		var out []string
		for _, u := range q.GetUnknownNonces() {
			out = append(out, fmt.Sprint(u.GetNonce(), u.GetFound(), u.GetTxHash(), u.GetTo(), u.GetValue(), u.GetData(), u.GetGasLimit(), u.GetBlockNumber(),
				u.GetRecoveredTxId(), u.GetAdopted(), u.GetAdoptedByRequestId(), u.GetUnclaimedUntil() != nil))
		}
		return out
	}
	wantSummary := fmt.Sprint(quarantined.Hex(), true, 5, 8, "node-a", 6, 2, []string{"ADOPTED:5-5/1", "NOT_RECORDED:6-6/1", "UNCLAIMED:7-7/1"})
	tests := []struct {
		name        string
		req         *v1.GetQuarantineRequest
		wantSummary string
		wantUnknown []string
		wantNext    uint64
	}{
		{name: "the summary", req: &v1.GetQuarantineRequest{Signer: quarantined.Hex()}, wantSummary: wantSummary},
		{name: "the first page of nonces", req: &v1.GetQuarantineRequest{Signer: quarantined.Hex(), ListNonces: true, Limit: 2}, wantSummary: wantSummary,
			wantUnknown: []string{
				fmt.Sprint(5, true, adoptedHash.Hex(), dev[1].Hex(), "7", "0x0102", 21000, 12, adoptedID.String(), true, "order-5", false),
				fmt.Sprint(6, false, "", "", "", "", 0, 0, "", false, "", false),
			}, wantNext: 7},
		{name: "the rest", req: &v1.GetQuarantineRequest{Signer: quarantined.Hex(), ListNonces: true, FromNonce: 7}, wantSummary: wantSummary,
			wantUnknown: []string{fmt.Sprint(7, true, unclaimedHash.Hex(), "", "0", "0x", 90000, 0, unclaimedID.String(), false, "", true)}},
		{name: "a signer never quarantined", req: &v1.GetQuarantineRequest{Signer: dev[3].Hex(), ListNonces: true},
			wantSummary: fmt.Sprint(dev[3].Hex(), false, 0, 0, "", 0, 0, []string(nil))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, err := node.admin.GetQuarantine(ctx, tt.req)
			if err != nil {
				t.Fatal(err)
			}
			if got := summary(q); got != tt.wantSummary {
				t.Errorf("quarantine %s, want %s", got, tt.wantSummary)
			}
			if got := unknown(q); fmt.Sprint(got) != fmt.Sprint(tt.wantUnknown) {
				t.Errorf("unknown nonces\n got %v\nwant %v", got, tt.wantUnknown)
			}
			if q.GetNextFromNonce() != tt.wantNext {
				t.Errorf("next from nonce %d, want %d", q.GetNextFromNonce(), tt.wantNext)
			}
		})
	}
	// The adopted nonce's digest lets an operator compare call data without reading it.
	t.Run("data digest", func(t *testing.T) {
		q, err := node.admin.GetQuarantine(ctx, &v1.GetQuarantineRequest{Signer: quarantined.Hex(), ListNonces: true, Limit: 1})
		if err != nil || len(q.GetUnknownNonces()) != 1 {
			t.Fatalf("%v %v", q, err)
		}
		if got, want := q.GetUnknownNonces()[0].GetDataDigest(), crypto.Keccak256Hash([]byte{1, 2}).Hex(); got != want {
			t.Errorf("digest %s, want %s", got, want)
		}
	})

	releases := []struct {
		name   string
		req    *v1.ReleaseSignerRequest
		status int
		reason v1.ErrorReason
		field  string
	}{
		{name: "a note with control characters", req: &v1.ReleaseSignerRequest{Signer: quarantined.Hex(), Note: "x\x07"},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "note"},
		{name: "a signer not quarantined", req: &v1.ReleaseSignerRequest{Signer: dev[3].Hex()}, status: http.StatusNotFound, reason: v1.ErrorReason_NOT_FOUND},
		{name: "on a chain not served here", req: &v1.ReleaseSignerRequest{ChainId: 99, Signer: quarantined.Hex()},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "chainId"},
		{name: "released", req: &v1.ReleaseSignerRequest{Signer: quarantined.Hex(), Note: "checked the chain"}},
	}
	for _, tt := range releases {
		t.Run("release/"+tt.name, func(t *testing.T) {
			q, err := node.admin.ReleaseSigner(ctx, tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if q.GetQuarantined() || q.GetReleasedBy() != "ops" || q.GetReleaseNote() != "checked the chain" || q.GetReleaseRequestedBy() != "ops" ||
				q.GetReleasedAt() == nil || q.GetReleaseRequestedAt() == nil || !q.GetDetectedAt().AsTime().Equal(detected) {
				t.Errorf("after the release %v, want it released by ops with the note", q)
			}
		})
	}
}

// A quarantine record that cannot be read is UNAVAILABLE with a retry hint, never an
// empty "not quarantined" answer.
func TestQuarantineStoreFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	node := env.node(t, "node-a", nodeOptions{adminStore: &quarantineStore{err: errStore}})
	_, err := node.admin.GetQuarantine(as(adminCaller), &v1.GetQuarantineRequest{Signer: env.dev[0].Hex()})
	if md := wantAPIError(t, err, http.StatusServiceUnavailable, v1.ErrorReason_UNAVAILABLE, ""); md[controllers.MetadataRetryAfter] == "" {
		t.Errorf("metadata %v without a retry hint", md)
	}
}

// The roster calls record who changed what and answer the signer as recorded; a retiring
// signer is answered with the work it still has to finish.
func TestRosterCallsRecordTheOperator(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	node := env.node(t, "node-a", nodeOptions{})
	added, busy := testsupport.SignerAddress(10), dev[0]
	ctx := as(adminCaller)
	roster := func(s *v1.RosterSigner) string {
		return fmt.Sprint(s.GetSigner(), s.GetSource(), s.GetKeyRef(), s.GetState(), s.GetAddedBy(), s.GetRetiredBy(), s.GetNote(), s.GetUnfinished(),
			s.GetAddedAt() != nil, s.GetRetiringAt() != nil, s.GetRetiredAt() != nil)
	}
	tests := []struct {
		name string
		call func() (*v1.RosterSigner, error)
		// before runs first (a create the retirement must wait for).
		before func(t *testing.T)
		want   string
		status int
		reason v1.ErrorReason
		field  string
	}{
		{name: "added", call: func() (*v1.RosterSigner, error) {
			return node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: added.Hex(), Source: "keystore", Note: "new hot wallet"})
		}, want: fmt.Sprint(added.Hex(), "keystore", "", "active", "ops", "", "new hot wallet", 0, true, false, false)},
		{name: "added again with the same key", call: func() (*v1.RosterSigner, error) {
			return node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: added.Hex(), Source: "keystore"})
		}, want: fmt.Sprint(added.Hex(), "keystore", "", "active", "ops", "", "new hot wallet", 0, true, false, false)},
		{name: "added again with another key", status: http.StatusConflict, reason: v1.ErrorReason_SIGNER_ACTIVE, call: func() (*v1.RosterSigner, error) {
			return node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: added.Hex(), Source: "awsKms", KeyRef: "alias/hot"})
		}},
		{name: "a source that does not exist", status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "source", call: func() (*v1.RosterSigner, error) {
			return node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: dev[3].Hex(), Source: "paper"})
		}},
		{name: "a key source this node cannot read", status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "keyRef",
			before: func(*testing.T) { node.keys.buildErr = errStore }, call: func() (*v1.RosterSigner, error) {
				defer func() { node.keys.buildErr = nil }()
				return node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: dev[3].Hex(), Source: "gcpKms", KeyRef: "projects/p/keys/k"})
			}},
		{name: "retired at once with nothing unfinished", call: func() (*v1.RosterSigner, error) {
			return node.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: added.Hex(), Note: "rotated"})
		}, want: fmt.Sprint(added.Hex(), "keystore", "", "retired", "ops", "ops", "rotated", 0, true, true, true)},
		{name: "retiring while a transaction is unfinished", before: func(t *testing.T) {
			if _, err := node.admin.AddSigner(ctx, &v1.AddSignerRequest{Signer: busy.Hex(), Source: "external"}); err != nil {
				t.Fatal(err)
			}
			if _, err := node.tx.CreateTx(as(anyCaller), &v1.CreateTxRequest{Signer: busy.Hex(), To: dev[1].Hex(), GasLimit: 21000}); err != nil {
				t.Fatal(err)
			}
		}, call: func() (*v1.RosterSigner, error) {
			return node.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: busy.Hex(), Note: "drain"})
		}, want: fmt.Sprint(busy.Hex(), "external", "", "retiring", "ops", "ops", "drain", 1, true, true, false)},
		{name: "a signer in no roster", status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_UNKNOWN_SIGNER, call: func() (*v1.RosterSigner, error) {
			return node.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: testsupport.SignerAddress(11).Hex()})
		}},
		{name: "retire a signer that does not parse", status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "signer", call: func() (*v1.RosterSigner, error) {
			return node.admin.RetireSigner(ctx, &v1.RetireSignerRequest{Signer: "nope"})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.before != nil {
				tt.before(t)
			}
			s, err := tt.call()
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := roster(s); got != tt.want {
				t.Errorf("roster signer\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	t.Run("the roster lists both", func(t *testing.T) {
		list, err := node.admin.ListRoster(ctx, &v1.ListRosterRequest{})
		if err != nil {
			t.Fatal(err)
		}
		states := map[string]string{}
		for _, s := range list.GetSigners() {
			states[s.GetSigner()] = fmt.Sprint(s.GetState(), "/", s.GetUnfinished())
		}
		if want := map[string]string{added.Hex(): "retired/0", busy.Hex(): "retiring/1"}; fmt.Sprint(states) != fmt.Sprint(want) {
			t.Errorf("roster %v, want %v", states, want)
		}
	})
}
