package txmclient_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// Connecting: the service's gRPC endpoints, a credential and TLS. The client retries what
// is safe to retry and moves to the next endpoint when one cannot serve.
func ExampleNew() {
	ctx := context.Background()
	pem, err := os.ReadFile(caFile) // the CA that issued the service's certificate
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client, closeClient, err := txmclient.New(ctx, txmclient.Config{
		Endpoints: []string{grpcAddr}, // one load balancer, or every node
		APIKey:    apiKey,             // or BearerToken: func(ctx) (string, error) for a JWT
		TLS:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer closeClient()

	_, err = client.GetByRequest(ctx, signer, "never-sent")
	fmt.Println("not found:", v1.IsNotFound(err))
	// Output: not found: true
}

// Creating: a request id is mandatory. Sending the same request again (after a timeout, a
// crash, a deploy) returns the first transaction instead of creating a second one.
func ExampleClient_Create() {
	ctx := context.Background()
	client, closeClient := connect(apiKey)
	defer closeClient()

	req := &v1.CreateTxRequest{
		Signer:    signer,
		To:        recipient,
		Value:     "1000", // wei
		GasLimit:  21000,
		RequestId: "payout-42", // your own id for this payment
	}
	first, err := client.Create(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	again, err := client.Create(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("created:", first.GetCreated(), first.GetTx().GetState())
	fmt.Println("replayed the same transaction:", !again.GetCreated() && again.GetTx().GetTxId() == first.GetTx().GetTxId())
	// Output:
	// created: true ALLOCATED
	// replayed the same transaction: true
}

// Waiting for one transaction: Wait returns once it is CONFIRMED or FAILED_FINAL. The
// service holds each call open until then (a long-poll woken by the completions feed), so
// the client does not poll.
func ExampleClient_Wait() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, closeClient := connect(apiKey)
	defer closeClient()

	created, err := client.Create(ctx, &v1.CreateTxRequest{Signer: signer, To: recipient, Value: "1000", GasLimit: 21000, RequestId: "payout-43"})
	if err != nil {
		log.Fatal(err)
	}
	tx, err := client.Wait(ctx, created.GetTx().GetTxId())
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tx.GetState(), tx.GetReceipt().GetStatus() == 1)
	// Output: CONFIRMED true
}

// Watching the completions feed: every final result, in order, as it happens. Keep the
// cursor of the last completion handled and pass it to the next Watch: nothing is missed
// or seen twice, across reconnects, restarts and nodes. (To apply completions to your own
// PostgreSQL database exactly once, use the feed module's Consumer.)
func ExampleClient_Watch() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	client, closeClient := connect(apiKey)
	defer closeClient()

	mine := map[string]bool{}
	for _, id := range []string{"payout-44", "payout-45", "payout-46"} {
		created, err := client.Create(ctx, &v1.CreateTxRequest{Signer: signer, To: recipient, Value: "1000", GasLimit: 21000, RequestId: id})
		if err != nil {
			log.Fatal(err)
		}
		mine[created.GetTx().GetTxId()] = true
	}
	errDone := errors.New("all three completed")
	cursor, seen := "", 0 // "" reads from the start of the feed; store cursor to resume later
	err := client.Watch(ctx, cursor, func(ctx context.Context, c *v1.Completion) error {
		cursor = c.GetCursor()
		if mine[c.GetTxId()] && !c.GetPlaceholder() {
			seen++
			fmt.Println(c.GetStatus())
		}
		if seen == len(mine) {
			return errDone // ends Watch; any other error of yours would too
		}
		return nil
	})
	fmt.Println(errors.Is(err, errDone), cursor != "")
	// Output:
	// CONFIRMED
	// CONFIRMED
	// CONFIRMED
	// true true
}

// Errors carry a stable reason: test it with the API module's generated helpers. The
// client has already retried the retryable ones (Retryable says which); the others need
// a different request, or an operator.
func Example_errors() {
	ctx := context.Background()
	client, closeClient := connect(apiKey)
	defer closeClient()

	_, err := client.Create(ctx, &v1.CreateTxRequest{Signer: "0x0000000000000000000000000000000000000001", To: recipient, GasLimit: 21000, RequestId: "payout-47"})
	again, _ := txmclient.Retryable(err)
	fmt.Println("unknown signer:", v1.IsUnknownSigner(err), "retryable:", again)

	req := &v1.CreateTxRequest{Signer: signer, To: recipient, Value: "1000", GasLimit: 21000, RequestId: "payout-48"}
	if _, err := client.Create(ctx, req); err != nil {
		log.Fatal(err)
	}
	req.Value = "2000" // the same request id for another intent
	_, err = client.Create(ctx, req)
	fmt.Println("idempotency conflict:", v1.IsIdempotencyConflict(err))

	switch {
	case v1.IsSignerQuarantined(err):
		// An operator must release the signer (txmctl quarantine list / release).
	case v1.IsInsufficientFunds(err), v1.IsIntentReverts(err):
		// Fund the signer, or fix the call.
	}
	// Output:
	// unknown signer: true retryable: false
	// idempotency conflict: true
}

// connect is ExampleNew's connection with the given API key.
func connect(key string) (*txmclient.Client, func()) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		log.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client, closeClient, err := txmclient.New(context.Background(), txmclient.Config{
		Endpoints: []string{grpcAddr}, APIKey: key, TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
	})
	if err != nil {
		log.Fatal(err)
	}
	return client, closeClient
}
