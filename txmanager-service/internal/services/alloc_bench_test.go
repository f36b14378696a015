package services_test

import (
	"context"
	"math/big"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/testsupport"
)

// BenchmarkAllocateBatch measures the writer's database path alone: one batch transaction
// per iteration for one signer, at several batch sizes.
func BenchmarkAllocateBatch(b *testing.B) {
	for _, size := range []int{1, 16, 64, 256} {
		b.Run("ops="+itoa(size), func(b *testing.B) {
			pool := testsupport.MigratedPool(b)
			node := newTestNode(b, pool, "bench", nodeOptions{})
			signer := signerAddress(9)
			for b.Loop() {
				ops := make([]*services.AllocationOp, size)
				for i := range ops {
					ops[i] = services.NewAllocationOp(domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &signer, Value: big.NewInt(int64(i)), GasLimit: 21000}}, 21000)
				}
				node.allocator.AllocateBatch(context.Background(), ops)
				if _, _, err := ops[size-1].Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

func itoa(i int) string { return big.NewInt(int64(i)).String() }
