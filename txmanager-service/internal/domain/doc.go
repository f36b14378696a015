// Package domain holds the transaction manager's concepts: managed transactions and their
// state machine, intents and their validation, leases and the nonce rule, and the domain
// errors. It does no I/O and knows nothing of PostgreSQL, Kratos or chain clients.
//
// Every layer may import it; it imports nothing of the service.
package domain
