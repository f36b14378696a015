// Package telemetry holds the service's metric instruments (docs/operations.md#metrics), the tracer
// provider and the loggers. Instruments are created from an OpenTelemetry MeterProvider;
// with the no-op provider every call is free. A chain's components record through its
// ForChain view, so their series carry chain_id.
//
// Every layer that measures imports it; it imports nothing of the service but conf.
package telemetry
