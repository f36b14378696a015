package conf

import _ "embed"

//go:embed defaults.yaml
var defaultsYAML []byte

// Bootstrap is the whole configuration, loaded once in main.
type Bootstrap struct {
	// Environment is "development" (raw keys and the embedded chain's dev keys allowed) or
	// "production".
	Environment string   `json:"environment"`
	Node        Node     `json:"node"`
	Server      Server   `json:"server"`
	Database    Database `json:"database"`
	Lease       Lease    `json:"lease"`
	Writer      Writer   `json:"writer"`
	Nonce       Nonce    `json:"nonce"`
	Recovery    Recovery `json:"recovery"`
	Create      Create   `json:"create"`
	// Chain is the one chain of a single-chain deployment, and the defaults every entry of
	// Chains starts from.
	Chain Chain `json:"chain"`
	// Chains lists the chains one deployment serves, each with its id; empty means Chain
	// alone. The same key on two chains is two signers with their own leases and nonces.
	Chains        []Chain       `json:"chains"`
	Signers       Signers       `json:"signers"`
	Routing       Routing       `json:"routing"`
	Pipeline      Pipeline      `json:"pipeline"`
	Confirmations Confirmations `json:"confirmations"`
	Resubmit      Resubmit      `json:"resubmit"`
	Stuck         Stuck         `json:"stuck"`
	Fees          Fees          `json:"fees"`
	Auth          Auth          `json:"auth"`
	Observability Observability `json:"observability"`
	Feed          Feed          `json:"feed"`
	Retention     Retention     `json:"retention"`
	Webhooks      Webhooks      `json:"webhooks"`
	Console       Console       `json:"console"`
	Runtime       Runtime       `json:"runtime"`
}

// Node names this instance (default hostname:grpc-port).
type Node struct {
	ID string `json:"id"`
}

// Environments.
const (
	EnvironmentDevelopment = "development"
	EnvironmentProduction  = "production"
)
