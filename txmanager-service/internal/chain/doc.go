// Package chain holds the adapters behind services.Chain: RPCChain talks to any EVM node
// over JSON-RPC, MultiChain puts several endpoints behind one (deadlines, health probes,
// failover), and SimulatedChain runs an in-process go-ethereum chain for development and
// tests. classify.go reads what a node's error message means (its phrase table); what
// each class then means for a transaction is services.OutcomeOf.
//
// It imports services (the port and its types); app wires it, nothing else in the service
// imports it.
package chain
