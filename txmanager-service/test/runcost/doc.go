// Package runcost says what a measured run cost, for the benchmarks that report cost per
// transaction (bench-chain and the receipt pipeline benchmark):
//
//   - CPUAccount: the CPU seconds of each participant's process (service, chain, load
//     generator) and of the database's server processes, read from /proc, with how busy the
//     machine's cores were and how much of them the hypervisor took;
//   - StartDatabaseCount, TakeDatabaseSnapshot and CountStatements: what the database did between two
//     snapshots (row versions written and left dead, by table; WAL bytes, records and
//     full-page images; pg_stat_statements' calls, time and costliest statements), printed
//     per transfer by PrintDatabaseCost;
//   - ProfileTop: the top of a CPU profile, by `go tool pprof`.
//
// Counting statements needs pg_stat_statements preloaded (PostgresSettings), which only a
// server start sets: callers run a PostgreSQL cluster of their own, whose WAL and background
// processes are then the run's alone. Only test code imports this package.
package runcost
