// Package app assembles the whole service with Wire: configuration mapped onto each
// layer's own types (config.go), the data layer, one stack per served chain (connection,
// leases, writer, pipeline stages and their loops), the use cases, controllers and servers,
// and the start and stop order that loses nothing. The binary in cmd/txmanager-service and
// the integration tests build it the same way.
//
// Only main and tests import it. It imports every other layer.
package app
