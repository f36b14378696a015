// Package workers holds the service's long-running loops: the transaction writer, the
// pipeline's loops (submit, receipts, finality, resubmit, stuck and reconciliation, adopting
// open signers), the lease keeper, the feed sequencer, retention and gauges. Each has an
// owner that starts it, stops it and waits for it; queues are bounded. The loops decide
// when a stage runs; the stages (internal/pipeline) decide what happens.
//
// It imports services, the pipeline packages, domain, telemetry and conf; app assembles it.
package workers
