// Package repositories is the PostgreSQL adapter: it implements the store ports of the
// use cases and of each pipeline stage over sqlc queries (queries/*.sql, generated into
// sqlcdb), one file per store and per query file. Every critical write is one fenced
// statement that locks the signer's lease row FOR KEY SHARE while it writes, or runs in a
// transaction that locked it (fencing.go is the one place a lost lease becomes FENCED).
//
// Batch writes. A statement that writes a batch (signing, broadcast outcomes, receipts,
// finality, reorgs, re-pricing) unnests its arrays into `input` and joins managed_tx on the
// primary key. Its other checks (chain and signer, state, no receipt yet) are written
// against columns of input, so they are part of the join and never a filter on managed_tx
// alone. The planner estimates such a filter from statistics, and those go stale within
// seconds: after a quiet hour ANALYZE has seen every row final, so during the next burst
// it expects one open row where there are thousands. Given that estimate it scanned
// managed_tx first and read the whole input again for each open row it found. The
// one-signer finality statement took 0.4-6.4 s for a few hundred rows this way
// (TestBatchWritesDoNotTrustStaleStatistics). Joined by key alone, the plan depends only
// on the batch's length and the table's size, which the planner always knows.
//
// It imports services, the pipeline stages (for their port types), domain, telemetry, conf
// and the transaction library; app assembles it.
package repositories
