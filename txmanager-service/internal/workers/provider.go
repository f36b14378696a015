package workers

import (
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ProviderSet is the background loops.
var ProviderSet = wire.NewSet(
	NewWriterConfig,
	NewTransactionWriter,
	wire.Bind(new(services.AllocationQueue), new(*TransactionWriter)),
	NewLeaseKeeperFromConfig,
)

// NewWriterConfig maps the writer section.
func NewWriterConfig(c *conf.Bootstrap) WriterConfig {
	return WriterConfig{Workers: c.Writer.Workers, BatchSize: c.Writer.BatchSize, BatchWait: c.Writer.BatchWait.Std(), QueueSize: c.Writer.QueueSize}
}

// NewLeaseKeeperFromConfig builds the keeper with the configured renew interval.
func NewLeaseKeeperFromConfig(c *conf.Bootstrap, leases *services.LeaseManager) *LeaseKeeper {
	return NewLeaseKeeper(leases, c.Lease.RenewInterval.Std())
}
