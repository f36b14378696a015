package server

import (
	"context"
	"sync"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// maxForwardBatch bounds the creates one ForwardCreates call may carry; a forwarder never
// sends more (forwardBatchLimit), so a larger call is not from a node of this deployment.
const maxForwardBatch = 256

// peerService runs the creates another node forwarded in a batch, each as CreateTx would.
type peerService struct {
	v1.UnimplementedPeerServiceServer
	tx *controllers.TxController
}

// ForwardCreates implements v1.PeerServiceServer: the creates run side by side (each joins
// the writer's batches as a create of its own would), and every one is answered on its own.
func (p *peerService) ForwardCreates(ctx context.Context, req *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
	// A batch costs the caller one request of its rate limit and runs many creates at once:
	// it is for the deployment's own nodes (a verified peer's forwarded call), not clients.
	if controllers.Hops(ctx) == 0 {
		return nil, v1.ErrorPermissionDenied("ForwardCreates serves the deployment's nodes only; send creates with CreateTx")
	}
	creates, timeouts := req.GetCreates(), req.GetTimeoutsMs()
	if len(creates) > maxForwardBatch {
		return nil, v1.ErrorInvalidArgument("a forwarded batch carries at most %d creates", maxForwardBatch)
	}
	results := make([]*v1.CreateTxResult, len(creates))
	var wg sync.WaitGroup
	for i, create := range creates {
		wg.Go(func() {
			ctx := ctx
			if i < len(timeouts) && timeouts[i] > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, time.Duration(timeouts[i])*time.Millisecond)
				defer cancel()
			}
			resp, err := p.tx.CreateTxIsolated(ctx, create)
			if err != nil {
				results[i] = v1.CreateResultOf(nil, err)
				return
			}
			results[i] = v1.CreateResultOf(resp, nil)
		})
	}
	wg.Wait()
	return &v1.ForwardCreatesResponse{Results: results}, nil
}
