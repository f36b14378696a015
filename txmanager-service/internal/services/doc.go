// Package services holds the use cases (create, get, completions, leases and allocation,
// admin, funds, nodes, retention), the ports they need (ports.go, chain_port.go,
// signer_port.go), and the pure policies several of them share: fees (fees.go) and what a
// node's answer to a broadcast means (chain_outcomes.go). Repositories, the chain adapter,
// the signer registry and the workers implement or drive these ports; nothing here knows
// how they are implemented.
//
// It imports domain, telemetry and the transaction library; it never imports the adapters,
// the pipeline stages or conf (its configuration types are mapped in internal/app).
package services
