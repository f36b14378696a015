// Package conf is the service's typed configuration: embedded defaults (defaults.yaml), an
// optional file, then the environment variables the defaults name; refused at load when a
// key is unknown (with the nearest known one) or a value does not fit its setting, and
// checked as a whole (Check) with every problem naming the key to change.
//
// Files by concern: bootstrap.go (the whole), server.go (listeners, TLS, auth, routing,
// observability), chains.go (chains, endpoints, confirmations and fees), pipeline.go
// (leases, writer, nonces, create checks and the pipeline's loops), database.go,
// signers.go, load.go, yaml.go and keys.go (loading and strict decoding), check.go.
//
// No error of loading or checking quotes a value, only its key (and the file's line): a
// value written in the wrong place may be a raw key, a passphrase or a DSN password, and
// errors reach the log.
//
// Only main and the assembly (internal/app) and the adapters that build themselves from
// it (repositories, server, signer, telemetry, workers) import this package; the domain,
// services and pipeline stages take their own configuration types, mapped in
// internal/app/config.go.
package conf
