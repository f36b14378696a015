// Package writer is the create path's write stage (docs/design.md#writer-batches): creates
// are routed by signer to a fixed worker, and each worker writes what it has queued as one
// database transaction in which every signer's part is checked against its lease, replayed
// or adopted where the request is on record, numbered and stored, all fenced.
//
//   - queue.go: the workers, their queues and how a create waits for its batch.
//   - batch.go: one batch: leases and chain nonces first, then the transaction.
//   - assign.go: what each create of a signer's part gets (replay, adoption, new nonce).
//   - quarantine.go: a signer whose chain is ahead of the database is not allocated for.
package writer
