package txmclient_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

func createTx(t *testing.T, client *txmclient.Client, requestID string) *v1.Tx {
	t.Helper()
	resp, err := client.Create(context.Background(), &v1.CreateTxRequest{Signer: signer, To: recipient, Value: "1", GasLimit: 21000, RequestId: requestID})
	if err != nil {
		t.Fatalf("create %s: %v", requestID, err)
	}
	return resp.GetTx()
}

// Wait answers with the final transaction, by id or by request id; on a transaction that
// is final already at once; on an unknown one with NOT_FOUND, not retried.
func TestWaitReturnsTheFinalTransaction(t *testing.T) {
	client, closeClient := connect(apiKey)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	created := createTx(t, client, t.Name())
	started := time.Now()
	tx, err := client.Wait(ctx, created.GetTxId())
	if err != nil || tx.GetState() != "CONFIRMED" || tx.GetReceipt() == nil {
		t.Fatalf("Wait: %v %v, want CONFIRMED with its receipt", tx, err)
	}
	t.Logf("Wait returned CONFIRMED %s after the create", time.Since(started).Round(time.Millisecond))
	byRequest, err := client.WaitByRequest(ctx, 0, signer, t.Name())
	if err != nil || byRequest.GetTxId() != created.GetTxId() || byRequest.GetState() != "CONFIRMED" {
		t.Fatalf("WaitByRequest: %v %v", byRequest, err)
	}
	started = time.Now()
	if _, err := client.Wait(ctx, created.GetTxId()); err != nil || time.Since(started) > 2*time.Second {
		t.Fatalf("Wait on a final transaction: %v after %s, want an answer at once", err, time.Since(started))
	}
	_, err = client.Wait(ctx, "00000000-0000-7000-8000-000000000000")
	if again, _ := txmclient.Retryable(err); !v1.IsNotFound(err) || again {
		t.Fatalf("Wait on an unknown transaction: %v, want NOT_FOUND, not retryable", err)
	}
}

// Watch stopped by its handler and started again from the last cursor the handler saw
// delivers every completion once; a handler's error ends Watch with that very error.
func TestWatchResumesAfterTheLastCompletionHandled(t *testing.T) {
	client, closeClient := connect(apiKey)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	want := map[string]bool{}
	for i := range 6 {
		want[createTx(t, client, fmt.Sprintf("%s-%d", t.Name(), i)).GetTxId()] = true
	}
	seen := map[string]int{}
	cursor, mine := "", 0
	watch := func(stopAt int) error {
		errStop := errors.New("stop")
		err := client.Watch(ctx, cursor, func(_ context.Context, c *v1.Completion) error {
			seen[c.GetTxId()]++
			cursor = c.GetCursor()
			if want[c.GetTxId()] {
				if mine++; mine == stopAt {
					return errStop
				}
			}
			return nil
		})
		if !errors.Is(err, errStop) {
			return fmt.Errorf("Watch ended with %w, want the handler's error", err)
		}
		return nil
	}
	if err := watch(3); err != nil {
		t.Fatal(err)
	}
	if err := watch(6); err != nil {
		t.Fatal(err)
	}
	for id := range want {
		if seen[id] != 1 {
			t.Fatalf("completion %s delivered %d times (all: %v)", id, seen[id], seen)
		}
	}
}

// A caller whose credential sees one signer is handed, with OnMark, a cursor past another
// signer's completion and never that completion: the cursor it stores moves on while its
// own signer is quiet, so retention does not leave it behind. Without OnMark, fn alone is
// called, with completions only.
func TestWatchHandsMarksPastOtherSignersCompletions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	everyone, closeEveryone := connect(apiKey)
	defer closeEveryone()
	created, err := everyone.Create(ctx, &v1.CreateTxRequest{Signer: servicetest.BulkSigner, To: recipient, Value: "1", GasLimit: 21000, RequestId: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := everyone.Wait(ctx, created.GetTx().GetTxId()); err != nil {
		t.Fatal(err)
	}
	othersAt := feedPosition(t, everyone, created.GetTx().GetTxId())

	devOnly, closeDevOnly := connect(devKey)
	defer closeDevOnly()
	errPast := errors.New("marked past the other signer's completion")
	lastMark := int64(0)
	err = devOnly.Watch(ctx, "", func(_ context.Context, c *v1.Completion) error {
		if c.GetTxId() == "" || !strings.EqualFold(c.GetSigner(), signer) {
			return fmt.Errorf("handed %v, want completions of %s alone", c, signer)
		}
		return nil
	}, txmclient.OnMark(func(_ context.Context, cursor string) error {
		at, err := strconv.ParseInt(cursor, 10, 64)
		if err != nil || at < lastMark {
			return fmt.Errorf("mark %q after %d: want a position that does not go back", cursor, lastMark)
		}
		if lastMark = at; at >= othersAt {
			return errPast
		}
		return nil
	}))
	if !errors.Is(err, errPast) {
		t.Fatalf("Watch ended with %v (last mark %d), want a mark at or past the other signer's completion at %d", err, lastMark, othersAt)
	}
}

// feedPosition reads the feed from its start to txID's completion.
func feedPosition(t *testing.T, client *txmclient.Client, txID string) int64 {
	t.Helper()
	for cursor := ""; ; {
		page, err := client.ListCompletions(context.Background(), cursor, 1000, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.GetCompletions() {
			if c.GetTxId() == txID {
				at, err := strconv.ParseInt(c.GetCursor(), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return at
			}
		}
		if len(page.GetCompletions()) == 0 {
			t.Fatalf("%s is not in the feed", txID)
		}
		cursor = page.GetNext()
	}
}

// The operators' calls need the admin grant; with it they show the signers, the node,
// and refuse to release a signer that is not quarantined.
func TestAdminCallsNeedTheAdminGrant(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	caller, closeCaller := connect(apiKey)
	defer closeCaller()
	if _, err := caller.Signers(ctx, 0); !v1.IsPermissionDenied(err) {
		t.Fatalf("Signers without the admin grant: %v, want PERMISSION_DENIED", err)
	}
	admin, closeAdmin := connect(adminKey)
	defer closeAdmin()
	signers, err := admin.Signers(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range signers {
		found = found || (s.GetSigner() == signer && !s.GetQuarantined())
	}
	if len(signers) < 2 || !found {
		t.Fatalf("Signers: %v, want the development accounts with %s not quarantined", signers, signer)
	}
	status, err := admin.SignerStatus(ctx, 0, signer)
	if err != nil || status.GetSigner() != signer || status.GetChainId() == 0 {
		t.Fatalf("SignerStatus: %v %v", status, err)
	}
	nodes, err := admin.Nodes(ctx)
	if err != nil || len(nodes) != 1 || !nodes[0].GetAlive() {
		t.Fatalf("Nodes: %v %v, want this one node alive", nodes, err)
	}
	if _, err := admin.ReleaseSigner(ctx, 0, signer, "nothing to release"); !v1.IsNotFound(err) {
		t.Fatalf("release of a signer that is not quarantined: %v, want NOT_FOUND", err)
	}
}
