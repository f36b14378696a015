// Package workers holds the service's long-running loops: the pipeline's loops (submit,
// receipts, finality, resubmit, stuck and reconciliation, adopting open signers), the lease
// keeper, the feed sequencer, retention, the roster and gauges. Each has an owner that
// starts it, stops it and waits for it. The loops decide only when a stage runs; what a
// pass does, and what it keeps between passes (the receipt schedule), is the stage's own
// (internal/pipeline), and the writer's queue and batches are internal/writer's.
//
// It imports services, the pipeline packages, domain and telemetry; app assembles it.
package workers
