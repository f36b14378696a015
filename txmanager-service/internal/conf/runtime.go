package conf

// Runtime tunes Go's garbage collector for the process.
type Runtime struct {
	// GCPercent is GOGC: how far the heap grows past what the last collection kept before the
	// next one starts. The service allocates about 20 KB of short-lived objects per transfer
	// (requests, rows, RPC messages) over a live heap of a few tens of MB, so at Go's default
	// of 100 the collector ran often and took about a tenth of its CPU in make bench-chain;
	// 400 collects a quarter as often for about four times the live heap in memory. The
	// GOGC environment variable, when set, wins.
	GCPercent int `json:"gcPercent"`
	// MemoryLimitMiB is Go's soft memory limit (GOMEMLIMIT): near it the collector runs as
	// often as it must, whatever GCPercent says, so the larger heap GCPercent allows never
	// costs an out-of-memory kill. 0 sets 90% of the container's memory limit (the cgroup's)
	// when there is one and no limit otherwise. The GOMEMLIMIT environment variable, when
	// set, wins.
	MemoryLimitMiB int64 `json:"memoryLimitMiB"`
}

// check: the collector's settings are in range.
func (r Runtime) check(p *problems) {
	p.require(r.GCPercent >= 10 && r.GCPercent <= 10000, "runtime.gcPercent", "must be in 10..10000 (Go's default is 100)")
	p.require(r.MemoryLimitMiB >= 0, "runtime.memoryLimitMiB", "must not be negative (0: 90%% of the container's memory limit)")
}
