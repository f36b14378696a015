package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// wantAPIError fails t unless err is the API error with status and reason (and, when
// field is set, names that field), and returns the error's metadata.
func wantAPIError(t *testing.T, err error, status int, reason v1.ErrorReason, field string) map[string]string {
	t.Helper()
	var se *kerrors.Error
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T), want %d %s", err, err, status, reason)
	}
	if int(se.Code) != status || se.Reason != reason.String() {
		t.Fatalf("answered %d %s (%s), want %d %s", se.Code, se.Reason, se.Message, status, reason)
	}
	if field != "" && se.Metadata["field"] != field {
		t.Fatalf("error names field %q, want %q (%s)", se.Metadata["field"], field, se.Message)
	}
	return se.Metadata
}

// A create maps every field of the request onto the intent the writer records and answers
// the transaction as recorded; every refusal is the API error a client can act on.
func TestCreateTxMapsTheRequestAndItsRefusals(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	signer, to := dev[0], dev[1]
	unmanaged := testsupport.SignerAddress(1)
	node := env.node(t, "node-a", nodeOptions{})
	node.signers.retired[dev[3]] = true

	transfer := func(requestID, value string) *v1.CreateTxRequest {
		return &v1.CreateTxRequest{Signer: signer.Hex(), RequestId: requestID, To: to.Hex(), Value: value, GasLimit: 21000,
			MaxFeePerGas: "2000000000", MaxPriorityFeePerGas: "1000000000"}
	}
	var firstID string
	tests := []struct {
		name   string
		ctx    context.Context
		req    *v1.CreateTxRequest
		status int // 0: success
		reason v1.ErrorReason
		field  string
		check  func(t *testing.T, resp *v1.CreateTxResponse)
	}{
		{name: "created", ctx: as(granted("payments", signer)), req: transfer("order-1", "1000"), check: func(t *testing.T, resp *v1.CreateTxResponse) {
			tx := resp.GetTx()
			if !resp.GetCreated() {
				t.Error("a new request was answered as a replay")
			}
			if _, err := uuid.Parse(tx.GetTxId()); err != nil {
				t.Errorf("tx id %q: %v", tx.GetTxId(), err)
			}
			got := fmt.Sprint(tx.GetChainId(), tx.GetSigner(), tx.GetRequestId(), tx.GetTo(), tx.GetValue(), tx.GetGasLimit(), tx.GetState(), tx.GetNonce())
			want := fmt.Sprint(testChainID, signer.Hex(), "order-1", to.Hex(), "1000", 21000, domain.StateAllocated, 0)
			if got != want {
				t.Errorf("tx %s, want %s", got, want)
			}
			if tx.GetCreatedAt() == nil || tx.GetUpdatedAt() == nil || tx.GetTxHash() != "" || tx.GetReceipt() != nil || tx.GetRecovered() {
				t.Errorf("a freshly allocated tx answered as %v", tx)
			}
			firstID = tx.GetTxId()
		}},
		{name: "the same request again is a replay", ctx: as(anyCaller), req: transfer("order-1", "1000"), check: func(t *testing.T, resp *v1.CreateTxResponse) {
			if resp.GetCreated() || resp.GetTx().GetTxId() != firstID {
				t.Errorf("replay answered created=%t id %s, want the first transaction %s", resp.GetCreated(), resp.GetTx().GetTxId(), firstID)
			}
		}},
		{name: "call data travels as hex", ctx: as(anyCaller), req: &v1.CreateTxRequest{Signer: signer.Hex(), To: to.Hex(), Data: "0xdeadbeef", GasLimit: 50000},
			check: func(t *testing.T, resp *v1.CreateTxResponse) {
				if resp.GetTx().GetData() != "0xdeadbeef" || resp.GetTx().GetNonce() != 1 || resp.GetTx().GetValue() != "0" {
					t.Errorf("tx data %q nonce %d value %q, want 0xdeadbeef, the next nonce, 0", resp.GetTx().GetData(), resp.GetTx().GetNonce(), resp.GetTx().GetValue())
				}
			}},
		{name: "the same request id with another intent", ctx: as(anyCaller), req: transfer("order-1", "2000"),
			status: http.StatusConflict, reason: v1.ErrorReason_IDEMPOTENCY_CONFLICT},
		{name: "no credentials", ctx: context.Background(), req: transfer("order-2", "1"),
			status: http.StatusUnauthorized, reason: v1.ErrorReason_UNAUTHENTICATED},
		{name: "a signer the caller is not granted", ctx: as(granted("other", to)), req: transfer("order-2", "1"),
			status: http.StatusForbidden, reason: v1.ErrorReason_PERMISSION_DENIED},
		{name: "a signer that does not parse is a validation error", ctx: as(granted("other", to)), req: &v1.CreateTxRequest{Signer: "0xnot-an-address", To: to.Hex(), GasLimit: 21000},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "signer"},
		{name: "a signer this service holds no key for", ctx: as(anyCaller), req: &v1.CreateTxRequest{Signer: unmanaged.Hex(), To: to.Hex(), GasLimit: 21000},
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_UNKNOWN_SIGNER},
		{name: "a retired signer", ctx: as(anyCaller), req: &v1.CreateTxRequest{Signer: dev[3].Hex(), To: to.Hex(), GasLimit: 21000},
			status: http.StatusConflict, reason: v1.ErrorReason_SIGNER_RETIRED},
		{name: "no gas limit without estimation", ctx: as(anyCaller), req: &v1.CreateTxRequest{Signer: signer.Hex(), To: to.Hex()},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "gasLimit"},
		{name: "a chain not served here", ctx: as(anyCaller), req: &v1.CreateTxRequest{ChainId: 99, Signer: signer.Hex(), To: to.Hex(), GasLimit: 21000},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "chainId"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := node.tx.CreateTx(tt.ctx, tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				return
			}
			if err != nil {
				t.Fatalf("CreateTx: %v", err)
			}
			tt.check(t, resp)
		})
	}
}

// With estimation on, the chain is asked before anything is written: an intent that
// cannot run or cannot be paid for is refused without a nonce, one that can is padded.
func TestCreateTxAsksTheChainFirst(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	unfunded := testsupport.SignerAddress(2)
	node := env.node(t, "node-a", nodeOptions{estimateGas: true, signers: append(dev[:2:2], unfunded)})
	tests := []struct {
		name   string
		req    *v1.CreateTxRequest
		status int
		reason v1.ErrorReason
		// gasLimit is the padded estimate a success records.
		gasLimit uint64
	}{
		{name: "a transfer is estimated and padded", req: &v1.CreateTxRequest{Signer: dev[0].Hex(), To: dev[1].Hex(), Value: "1"}, gasLimit: 25200},
		{name: "code that cannot run", req: &v1.CreateTxRequest{Signer: dev[0].Hex(), Data: "0xfe"},
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_INTENT_REVERTS},
		{name: "a signer that cannot pay", req: &v1.CreateTxRequest{Signer: unfunded.Hex(), To: dev[1].Hex(), Value: "1000000000000000000"},
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_INSUFFICIENT_FUNDS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := node.tx.CreateTx(as(anyCaller), tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, "")
				return
			}
			if err != nil || resp.GetTx().GetGasLimit() != tt.gasLimit {
				t.Fatalf("CreateTx: gas limit %d err %v, want %d", resp.GetTx().GetGasLimit(), err, tt.gasLimit)
			}
		})
	}
}

// A node that does not hold a signer's lease answers NOT_LEADER naming the owner in basic
// mode, and in forward mode has the owner serve the create; a request forwarded to it is
// sent back rather than waited on, and the node a caller reached waits for an unreachable
// owner only as long as the caller's deadline allows.
func TestCreateTxRoutesToTheLeaseOwner(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	signer, to := env.dev[0], env.dev[1]
	reachable, unreachable := newPeers(), newPeers()
	owner := env.node(t, "node-a", nodeOptions{peers: reachable})
	forward := controllers.Routing{Forward: true, MaxHops: 1, RetryWait: 20 * time.Millisecond}
	basicNode := env.node(t, "node-basic", nodeOptions{peers: reachable})
	forwardNode := env.node(t, "node-forward", nodeOptions{peers: reachable, routing: forward})
	strandedNode := env.node(t, "node-stranded", nodeOptions{peers: unreachable, routing: forward})
	req := func(id string) *v1.CreateTxRequest {
		return &v1.CreateTxRequest{Signer: signer.Hex(), RequestId: id, To: to.Hex(), GasLimit: 21000}
	}
	if _, err := owner.tx.CreateTx(as(anyCaller), req("on-the-owner")); err != nil {
		t.Fatalf("the owner's first create: %v", err)
	}
	tests := []struct {
		name    string
		node    *testNode
		ctx     func() (context.Context, context.CancelFunc)
		status  int
		reason  v1.ErrorReason
		owner   string
		elapsed time.Duration // at least this long (waited for the owner)
	}{
		{name: "basic mode names the owner", node: basicNode, status: http.StatusConflict, reason: v1.ErrorReason_NOT_LEADER, owner: "node-a#test"},
		{name: "forward mode has the owner serve it", node: forwardNode},
		{name: "a forwarded request goes back to the node that forwarded it", node: strandedNode,
			ctx:    func() (context.Context, context.CancelFunc) { return controllers.WithHops(as(anyCaller), 1), func() {} },
			status: http.StatusConflict, reason: v1.ErrorReason_NOT_LEADER, owner: "node-a#test"},
		{name: "the caller's node waits out its deadline for an unreachable owner", node: strandedNode,
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(as(anyCaller), 300*time.Millisecond)
			},
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, elapsed: 300 * time.Millisecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := as(anyCaller), context.CancelFunc(func() {})
			if tt.ctx != nil {
				ctx, cancel = tt.ctx()
			}
			defer cancel()
			started := time.Now()
			resp, err := tt.node.tx.CreateTx(ctx, req("routed-"+strconv.Itoa(i)))
			if time.Since(started) < tt.elapsed {
				t.Errorf("answered after %s, want after waiting %s for the owner", time.Since(started), tt.elapsed)
			}
			if tt.status != 0 {
				md := wantAPIError(t, err, tt.status, tt.reason, "")
				if md[controllers.MetadataRetryAfter] == "" || md["owner"] != tt.owner {
					t.Errorf("metadata %v, want a retry hint and owner %q", md, tt.owner)
				}
				return
			}
			if err != nil || !resp.GetCreated() {
				t.Fatalf("forwarded create: %v %v", resp, err)
			}
			if fw := reachable.forwarded(); len(fw) != 1 || fw[0] != "node-a#test" {
				t.Errorf("forwarded to %v, want once to node-a#test", fw)
			}
		})
	}
}

// A batch is answered before the caller's deadline even when one of its creates is for a
// signer whose owner cannot be reached: that create alone is refused UNAVAILABLE, and the
// others are created. Were the batch answered at the deadline, the caller would have given
// up on all of them and sent them again, to the same wait.
func TestABatchIsAnsweredInTimeWhenOneOwnerCannotBeReached(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	stranded, served, to := env.dev[0], env.dev[2], env.dev[1]
	owner := env.node(t, "node-a", nodeOptions{peers: newPeers()})
	node := env.node(t, "node-stranded", nodeOptions{peers: newPeers(), routing: controllers.Routing{Forward: true, MaxHops: 1, RetryWait: 20 * time.Millisecond}})
	if _, err := owner.tx.CreateTx(as(anyCaller), &v1.CreateTxRequest{Signer: stranded.Hex(), RequestId: "held-by-node-a", To: to.Hex(), GasLimit: 21000}); err != nil {
		t.Fatalf("the owner's first create: %v", err)
	}
	const deadline = 5 * time.Second
	ctx, cancel := context.WithTimeout(as(anyCaller), deadline)
	defer cancel()
	started := time.Now()
	resp, err := node.tx.CreateTxBatch(ctx, &v1.CreateTxBatchRequest{Creates: []*v1.CreateTxRequest{
		{Signer: served.Hex(), RequestId: "batch-1", To: to.Hex(), GasLimit: 21000},
		{Signer: stranded.Hex(), RequestId: "batch-2", To: to.Hex(), GasLimit: 21000},
		{Signer: served.Hex(), RequestId: "batch-3", To: to.Hex(), GasLimit: 21000},
	}})
	if elapsed := time.Since(started); elapsed >= deadline {
		t.Errorf("answered after %s, at or past the caller's deadline of %s", elapsed, deadline)
	}
	if err != nil {
		t.Fatalf("CreateTxBatch: %v", err)
	}
	for _, i := range []int{0, 2} {
		if r := resp.GetResults()[i]; r.GetError() != nil || !r.GetResponse().GetCreated() {
			t.Errorf("results[%d] for the served signer: %v, want created", i, r)
		}
	}
	wantAPIError(t, resp.GetResults()[1].GetError().AsError(), http.StatusServiceUnavailable, v1.ErrorReason_UNAVAILABLE, "")
	if resp.GetCreated() != 2 || resp.GetRefused() != 1 {
		t.Errorf("counts: created %d, refused %d; want 2 and 1", resp.GetCreated(), resp.GetRefused())
	}
}

// Reads answer the transaction as recorded to callers granted its signer, and a long-poll
// waits for it to become final only as long as asked.
func TestGetTxReadsByIDAndByRequest(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	signer, to := dev[0], dev[1]
	node := env.node(t, "node-a", nodeOptions{})
	created, err := node.tx.CreateTx(as(anyCaller), &v1.CreateTxRequest{Signer: signer.Hex(), RequestId: "invoice-9", To: to.Hex(), Value: "5", GasLimit: 21000})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetTx().GetTxId()
	missing := uuid.NewString()
	tests := []struct {
		name   string
		ctx    context.Context
		read   func(ctx context.Context) (*v1.Tx, error)
		status int
		reason v1.ErrorReason
		field  string
		// waited: the answer came after the long-poll's bound, not before.
		waited time.Duration
	}{
		{name: "by id", ctx: as(granted("payments", signer)), read: func(ctx context.Context) (*v1.Tx, error) {
			return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: id})
		}},
		{name: "by request", ctx: as(granted("payments", signer)), read: func(ctx context.Context) (*v1.Tx, error) {
			return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{Signer: signer.Hex(), RequestId: "invoice-9"})
		}},
		{name: "by id, waiting for a transaction that does not become final", ctx: as(anyCaller), waited: 150 * time.Millisecond,
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: id, Wait: durationpb.New(150 * time.Millisecond)})
			}},
		{name: "by request, waiting", ctx: as(anyCaller), waited: 100 * time.Millisecond,
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{Signer: signer.Hex(), RequestId: "invoice-9", Wait: durationpb.New(100 * time.Millisecond)})
			}},
		{name: "a caller not granted the signer", ctx: as(granted("other", to)), status: http.StatusForbidden, reason: v1.ErrorReason_PERMISSION_DENIED,
			read: func(ctx context.Context) (*v1.Tx, error) { return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: id}) }},
		{name: "by request, a caller not granted the signer", ctx: as(granted("other", to)), status: http.StatusForbidden, reason: v1.ErrorReason_PERMISSION_DENIED,
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{Signer: signer.Hex(), RequestId: "invoice-9"})
			}},
		{name: "no credentials", ctx: context.Background(), status: http.StatusUnauthorized, reason: v1.ErrorReason_UNAUTHENTICATED,
			read: func(ctx context.Context) (*v1.Tx, error) { return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: id}) }},
		{name: "an unknown id", ctx: as(anyCaller), status: http.StatusNotFound, reason: v1.ErrorReason_NOT_FOUND,
			read: func(ctx context.Context) (*v1.Tx, error) { return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: missing}) }},
		{name: "an id that is no uuid", ctx: as(anyCaller), status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT,
			read: func(ctx context.Context) (*v1.Tx, error) { return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: "tx-1"}) }},
		{name: "a wait that is no duration", ctx: as(anyCaller), status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "wait",
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTx(ctx, &v1.GetTxRequest{TxId: id, Wait: &durationpb.Duration{Seconds: 1, Nanos: -1}})
			}},
		{name: "an unknown request", ctx: as(anyCaller), status: http.StatusNotFound, reason: v1.ErrorReason_NOT_FOUND,
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{Signer: signer.Hex(), RequestId: "invoice-10"})
			}},
		{name: "by request without a request id", ctx: as(anyCaller), status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "requestId",
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{Signer: signer.Hex()})
			}},
		{name: "by request on a chain not served here", ctx: as(anyCaller), status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "chainId",
			read: func(ctx context.Context) (*v1.Tx, error) {
				return node.tx.GetTxByRequest(ctx, &v1.GetTxByRequestRequest{ChainId: 99, Signer: signer.Hex(), RequestId: "invoice-9"})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			started := time.Now()
			tx, err := tt.read(tt.ctx)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tx.GetTxId() != id || tx.GetRequestId() != "invoice-9" || tx.GetValue() != "5" || tx.GetSigner() != signer.Hex() || tx.GetState() != string(domain.StateAllocated) {
				t.Errorf("read %v, want the created transaction", tx)
			}
			if elapsed := time.Since(started); elapsed < tt.waited {
				t.Errorf("answered after %s, want after the %s long-poll", elapsed, tt.waited)
			}
		})
	}
}

// completion is a positioned feed entry of signer on chain.
func completion(position int64, chainID uint64, signer common.Address) services.Completion {
	hash := common.BigToHash(common.Big1)
	return services.Completion{
		ChainID: chainID, TxID: uuid.New(), Signer: signer, Nonce: uint64(position), Status: domain.StateConfirmed, TxHash: &hash,
		BlockNumber: 100 + uint64(position), CompletedAt: time.Unix(1_700_000_000+position, 0).UTC(), RequestID: "req-" + strconv.FormatInt(position, 10),
		Position: services.FeedPosition(position),
	}
}

// The feed pages through completions from a cursor, only of the caller's signers and of
// the chain asked for, and answers each completion with the cursor that resumes after it.
func TestListCompletionsPagesTheCallersFeed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	node := env.node(t, "node-a", nodeOptions{})
	placeholder := completion(2, testChainID, dev[1])
	placeholder.Placeholder, placeholder.TxHash, placeholder.Status, placeholder.RequestID = true, nil, domain.StateFailedFinal, ""
	node.feed.add(completion(1, testChainID, dev[0]), placeholder, completion(3, 5, dev[0]))
	tests := []struct {
		name   string
		ctx    context.Context
		req    *v1.ListCompletionsRequest
		status int
		reason v1.ErrorReason
		field  string
		// want are the positions answered; next the cursor after them.
		want []string
		next string
	}{
		{name: "everything from the start", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{}, want: []string{"1", "2", "3"}, next: "3"},
		{name: "a page", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{Limit: 2}, want: []string{"1", "2"}, next: "2"},
		{name: "after a cursor", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{After: "1"}, want: []string{"2", "3"}, next: "3"},
		{name: "only the caller's signers", ctx: as(granted("payments", dev[0])), req: &v1.ListCompletionsRequest{}, want: []string{"1", "3"}, next: "3"},
		// The cursor moves on past the other chain's completion: a page that is not full
		// reaches the head.
		{name: "only one chain", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{ChainId: testChainID}, want: []string{"1", "2"}, next: "3"},
		{name: "nothing after the end answers the same cursor", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{After: "3"}, want: []string{}, next: "3"},
		{name: "no credentials", ctx: context.Background(), req: &v1.ListCompletionsRequest{}, status: http.StatusUnauthorized, reason: v1.ErrorReason_UNAUTHENTICATED},
		{name: "a chain not served here", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{ChainId: 5}, status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "chainId"},
		{name: "a page too large", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{Limit: 5000}, status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "limit"},
		{name: "a wait that is no duration", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{Wait: &durationpb.Duration{Seconds: -1, Nanos: 1}},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "wait"},
		{name: "a cursor that is no cursor", ctx: as(anyCaller), req: &v1.ListCompletionsRequest{After: "x"}, status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, field: "after"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			page, err := node.tx.ListCompletions(tt.ctx, tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, tt.field)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := []string{}
			for _, c := range page.GetCompletions() {
				got = append(got, c.GetCursor())
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) || page.GetNext() != tt.next {
				t.Errorf("positions %v next %q, want %v next %q", got, page.GetNext(), tt.want, tt.next)
			}
		})
	}
	t.Run("fields", func(t *testing.T) {
		t.Parallel()
		page, err := node.tx.ListCompletions(as(anyCaller), &v1.ListCompletionsRequest{Limit: 2})
		if err != nil || len(page.GetCompletions()) != 2 {
			t.Fatalf("%v %v", page, err)
		}
		want := []string{
			fmt.Sprint(testChainID, dev[0].Hex(), 1, "CONFIRMED", common.BigToHash(common.Big1).Hex(), 101, "2023-11-14T22:13:21Z", false, "req-1", false),
			fmt.Sprint(testChainID, dev[1].Hex(), 2, "FAILED_FINAL", "", 102, "2023-11-14T22:13:22Z", true, "", false),
		}
		for i, c := range page.GetCompletions() {
			got := fmt.Sprint(c.GetChainId(), c.GetSigner(), c.GetNonce(), c.GetStatus(), c.GetTxHash(), c.GetBlockNumber(),
				c.GetCompletedAt().AsTime().Format(time.RFC3339), c.GetPlaceholder(), c.GetRequestId(), c.GetRecovered())
			if got != want[i] {
				t.Errorf("completion %d: %s, want %s", i, got, want[i])
			}
			if _, err := uuid.Parse(c.GetTxId()); err != nil {
				t.Errorf("completion %d tx id %q: %v", i, c.GetTxId(), err)
			}
		}
	})
}

// A long-poll answers as soon as a completion arrives, and the feed's failures and
// retention reach the reader as errors it can act on.
func TestListCompletionsWaitsAndReportsTheFeed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	tests := []struct {
		name   string
		setup  func(n *testNode)
		req    *v1.ListCompletionsRequest
		status int
		reason v1.ErrorReason
		want   int
	}{
		{name: "a long-poll wakes for a new completion", req: &v1.ListCompletionsRequest{Wait: durationpb.New(2 * time.Second)}, want: 1,
			setup: func(n *testNode) {
				time.AfterFunc(50*time.Millisecond, func() {
					n.feed.add(completion(1, testChainID, dev[0]))
					n.notify.Broadcast()
				})
			}},
		{name: "a cursor into what retention deleted", req: &v1.ListCompletionsRequest{After: "3"}, status: http.StatusGone, reason: v1.ErrorReason_CURSOR_EXPIRED,
			setup: func(n *testNode) { n.feed.pruned = 10 }},
		{name: "a feed that cannot be read", req: &v1.ListCompletionsRequest{}, status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE,
			setup: func(n *testNode) { n.feed.err = errStore }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node := env.node(t, "node-"+strconv.Itoa(i), nodeOptions{})
			tt.setup(node)
			page, err := node.tx.ListCompletions(as(anyCaller), tt.req)
			if tt.status != 0 {
				wantAPIError(t, err, tt.status, tt.reason, "")
				return
			}
			if err != nil || len(page.GetCompletions()) != tt.want {
				t.Fatalf("page %v err %v, want %d completions", page, err, tt.want)
			}
		})
	}
}

// watchStream is the server side of a WatchCompletions stream: it records what was sent
// and ends the stream (its client leaves) once it has seen enough.
type watchStream struct {
	grpc.ServerStream
	ctx     context.Context
	leave   context.CancelFunc
	mu      sync.Mutex
	sent    []*v1.Completion
	enough  int
	sendErr error
}

func (s *watchStream) Context() context.Context { return s.ctx }

func (s *watchStream) Send(c *v1.Completion) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sendErr != nil {
		return s.sendErr
	}
	s.sent = append(s.sent, c)
	if len(s.sent) >= s.enough {
		s.leave()
	}
	return nil
}

// The stream sends the caller's completions from its cursor on, in order, until the client
// leaves; a client that cannot be written to ends it with that error.
func TestWatchCompletionsStreamsTheCallersFeed(t *testing.T) {
	t.Parallel()
	env := newTestEnv(t)
	dev := env.dev
	node := env.node(t, "node-a", nodeOptions{})
	node.feed.add(completion(1, testChainID, dev[0]), completion(2, testChainID, dev[1]), completion(3, testChainID, dev[0]), completion(4, testChainID, dev[0]))
	broken := errors.New("client gone")
	tests := []struct {
		name    string
		caller  *domain.Principal
		after   string
		enough  int
		sendErr error
		want    []string
		// wantMark: the last message sent is a mark, a cursor without a transaction.
		wantMark bool
		wantErr  error
		status   int
	}{
		{name: "from the cursor on, the caller's signers only", caller: &domain.Principal{ID: "p", Signers: map[common.Address]bool{dev[0]: true}}, after: "1", enough: 2, want: []string{"3", "4"}},
		{name: "everything for a caller granted every signer", caller: &anyCaller, enough: 4, want: []string{"1", "2", "3", "4"}},
		// Only others' completions after the cursor: a mark (a cursor, no transaction) moves
		// the client past them.
		{name: "past others' completions, a mark", caller: &domain.Principal{ID: "p", Signers: map[common.Address]bool{dev[1]: true}}, after: "2", enough: 1, want: []string{"4"}, wantMark: true},
		{name: "a client that cannot be written to", caller: &anyCaller, enough: 1, sendErr: broken, wantErr: broken},
		{name: "no credentials", enough: 1, status: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tt.caller != nil {
				ctx = domain.WithPrincipal(ctx, *tt.caller)
			}
			ctx, leave := context.WithCancel(ctx)
			defer leave()
			stream := &watchStream{ctx: ctx, leave: leave, enough: tt.enough, sendErr: tt.sendErr}
			err := node.tx.WatchCompletions(&v1.WatchCompletionsRequest{After: tt.after}, stream)
			switch {
			case tt.status != 0:
				wantAPIError(t, err, tt.status, v1.ErrorReason_UNAUTHENTICATED, "")
				return
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("stream ended with %v, want %v", err, tt.wantErr)
				}
				return
			case err != nil:
				t.Fatalf("stream ended with %v, want a clean end when the client left", err)
			}
			got := []string{}
			for _, c := range stream.sent {
				got = append(got, c.GetCursor())
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("streamed %v, want %v", got, tt.want)
			}
			if last := stream.sent[len(stream.sent)-1]; (last.GetTxId() == "") != tt.wantMark {
				t.Errorf("the last message %v: a mark %t, want %t", last, last.GetTxId() == "", tt.wantMark)
			}
		})
	}
}
