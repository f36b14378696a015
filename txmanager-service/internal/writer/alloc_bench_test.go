package writer_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// BenchmarkAllocateBatch measures the writer's database path alone: one batch transaction
// per iteration for one signer, at several batch sizes.
func BenchmarkAllocateBatch(b *testing.B) {
	for _, size := range []int{1, 16, 64, 256} {
		b.Run("ops="+strconv.Itoa(size), func(b *testing.B) {
			pool := testsupport.MigratedPool(b)
			node := testsupport.NewWriterNode(b, pool, "bench", testsupport.WriterNodeOptions{})
			signer := testsupport.SignerAddress(9)
			for b.Loop() {
				ops := node.Allocate(b, signer, size)
				if _, _, err := ops[size-1].Wait(context.Background()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
