// Package repositories is the PostgreSQL adapter: it implements the store ports of the
// use cases and of each pipeline stage over sqlc queries (queries/*.sql, generated into
// sqlcdb), one file per store and per query file. Every critical write is one fenced
// statement that locks the signer's lease row FOR KEY SHARE while it writes, or runs in a
// transaction that locked it (fencing.go is the one place a lost lease becomes FENCED).
//
// It imports services, the pipeline stages (for their port types), domain, telemetry, conf
// and the transaction library; app assembles it.
package repositories
