// Package e2e runs the real txmanager-service binary against a real geth node and a real
// PostgreSQL: it builds both binaries, starts them as child processes on loopback, funds
// signers, and talks to the service over its public HTTP API.
//
// Every process it starts is a direct child that it waits for and stops (the kernel kills
// it if this process dies first), so a run leaves nothing behind. The pieces are separate so
// that other suites (fault injection: several service instances against one node and one
// database, killed, paused and restarted) can combine them differently.
package e2e
