// Package server builds the Kratos HTTP and gRPC servers: routes, middleware (auth, rate
// limits, tracing), health and readiness, and forwarding a create to the node that holds
// its signer's lease.
//
// It imports controllers, services, domain, telemetry, conf and the API module; app
// assembles it.
package server
