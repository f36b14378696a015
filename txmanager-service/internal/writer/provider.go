package writer

import (
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ChainProviderSet is one chain's writer: its queues and the batches they write.
var ChainProviderSet = wire.NewSet(
	New,
	NewAllocator,
	wire.Bind(new(services.AllocationQueue), new(*Writer)),
	wire.Bind(new(BatchAllocator), new(*Allocator)),
)
