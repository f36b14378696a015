package receipts

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// With the finalized tag deciding, a receipt is final once the headers from its block up to
// the finalized one are read and link to each other (chainView). For a receipt far below
// the finalized block, that is a great many headers: rows restored from a day-old backup on
// a chain of quarter-second blocks are some 345,000 blocks deep. Read in every pass, they
// cost hundreds of calls a second, and one failed call failed the whole pass, for every
// signer of the chain: nothing was judged final any more.
//
// Such receipts are proven over several passes instead. The catch-up reads a bounded number
// of headers a pass, from the lowest deep receipt's block upwards, checking that each links
// to the one below, and keeps what it proved across passes: the highest header reached and
// the hashes at the deep receipts' heights. Once it is within catchUpBeyond of the finalized
// block, the pass reads the rest as for any receipt, and the link from the catch-up's top
// into those headers completes the proof. A failed call only stops the catch-up's progress
// for that pass.
const (
	// defaultCatchUpBeyond: a receipt whose proof needs more headers than this is deep.
	defaultCatchUpBeyond = 1_000
	// defaultCatchUpPerPass bounds the headers the catch-up reads in one pass.
	defaultCatchUpPerPass = 5_000
)

// catchUp is what the catch-up has proven so far: the headers from..top link to each other;
// topHash is top's hash and at holds the hashes at the deep receipts' heights among them.
type catchUp struct {
	mu      sync.Mutex
	valid   bool
	from    uint64
	top     uint64
	topHash common.Hash
	at      map[uint64]common.Hash
}

// catchUpSegment is one pass's copy of what the catch-up has proven (valid false: nothing).
type catchUpSegment struct {
	valid   bool
	top     uint64
	topHash common.Hash
	at      map[uint64]common.Hash
}

// advance extends the proof for the deep heights (ascending, each once) by at most perPass
// headers, never above limit, and returns what is proven. The error is that of a call for
// headers: what was proven before it is kept.
func (c *catchUp) advance(ctx context.Context, headers func(context.Context, []uint64) ([]*services.BlockHeader, error),
	deep []uint64, limit uint64, perPass int) (catchUpSegment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(deep) == 0 {
		c.valid, c.at = false, nil
		return catchUpSegment{}, nil
	}
	if !c.valid || deep[0] < c.from || deep[0] > c.top || c.missesOne(deep) {
		// A first deep receipt, one below what was proven, none inside it any more, or one
		// inside it whose hash was not kept: start again from the lowest.
		c.valid, c.from, c.top, c.topHash, c.at = true, deep[0], deep[0]-1, common.Hash{}, map[uint64]common.Hash{}
	}
	wanted := make(map[uint64]bool, len(deep))
	for _, h := range deep {
		wanted[h] = true
	}
	for h := range c.at {
		if !wanted[h] {
			delete(c.at, h) // final or reverted since: not needed any more
		}
	}
	var heights []uint64
	for h := c.top + 1; h <= limit && len(heights) < perPass; h++ {
		heights = append(heights, h)
	}
	var err error
	for chunk := range slices.Chunk(heights, headersPerCall) {
		read, callErr := headers(ctx, chunk)
		if callErr != nil {
			err = fmt.Errorf("catching up on headers %d-%d: %w", chunk[0], chunk[len(chunk)-1], callErr)
			break
		}
		if !c.extend(chunk, read, wanted) {
			break
		}
	}
	return catchUpSegment{valid: c.top >= c.from, top: c.top, topHash: c.topHash, at: maps.Clone(c.at)}, err
}

// extend adds read (the headers at heights) on top of what is proven, while each links to
// the one below. It reports whether all did: a header missing (an endpoint not there yet)
// stops this pass; one that does not link (a backend on another branch, behind a load
// balancer) starts the proof again at the next pass.
func (c *catchUp) extend(heights []uint64, read []*services.BlockHeader, wanted map[uint64]bool) bool {
	for i, h := range heights {
		if i >= len(read) || read[i] == nil {
			return false
		}
		if c.top >= c.from && read[i].ParentHash != c.topHash {
			c.valid = false
			return false
		}
		c.top, c.topHash = h, read[i].Hash
		if wanted[h] {
			c.at[h] = read[i].Hash
		}
	}
	return true
}

// missesOne: a deep height inside what was proven has no hash kept (its receipt was written
// after the catch-up passed its block).
func (c *catchUp) missesOne(deep []uint64) bool {
	for _, h := range deep {
		if h > c.top {
			return false
		}
		if _, ok := c.at[h]; !ok {
			return true
		}
	}
	return false
}
