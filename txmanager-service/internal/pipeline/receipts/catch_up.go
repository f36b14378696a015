package receipts

import (
	"context"
	"fmt"
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

// catchUp is what the catch-up has proven so far: the headers from from to from+len(hashes)-1
// link to each other, and hashes holds them. Every height's hash is kept (32 bytes each,
// about 11 MB for a day of quarter-second blocks), so a receipt written later for a block
// inside what was proven (a lease taken over with old rows, a reconciliation) is judged
// without starting again.
type catchUp struct {
	mu     sync.Mutex
	from   uint64
	hashes []common.Hash
}

// catchUpSegment is one pass's view of what the catch-up has proven (valid false: nothing).
type catchUpSegment struct {
	valid   bool
	from    uint64
	top     uint64
	topHash common.Hash
	// at holds the hashes at the heights of the deep receipts of the pass.
	at map[uint64]common.Hash
}

// advance extends the proof for the deep heights (ascending, each once) by at most perPass
// headers, never above limit, and returns what is proven. The error is that of a call for
// headers: what was proven before it is kept.
func (c *catchUp) advance(ctx context.Context, headers func(context.Context, []uint64) ([]*services.BlockHeader, error),
	deep []uint64, limit uint64, perPass int) (catchUpSegment, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(deep) == 0 {
		c.hashes = nil
		return catchUpSegment{}, nil
	}
	switch top := c.from + uint64(len(c.hashes)); {
	case len(c.hashes) == 0 || deep[0] < c.from || deep[0] >= top:
		// Nothing proven, a deep receipt below it, or none inside it any more: start at the
		// lowest.
		c.from, c.hashes = deep[0], nil
	case deep[0] > c.from:
		// The receipts below are final or reverted: their headers are not needed any more.
		c.hashes = slices.Clone(c.hashes[deep[0]-c.from:])
		c.from = deep[0]
	}
	var heights []uint64
	for h := c.from + uint64(len(c.hashes)); h <= limit && len(heights) < perPass; h++ {
		heights = append(heights, h)
	}
	var err error
	for chunk := range slices.Chunk(heights, headersPerCall) {
		read, callErr := headers(ctx, chunk)
		if callErr != nil {
			err = fmt.Errorf("catching up on headers %d-%d: %w", chunk[0], chunk[len(chunk)-1], callErr)
			break
		}
		if !c.extend(read) {
			break
		}
	}
	if len(c.hashes) == 0 {
		return catchUpSegment{}, err
	}
	segment := catchUpSegment{valid: true, from: c.from, top: c.from + uint64(len(c.hashes)) - 1, topHash: c.hashes[len(c.hashes)-1],
		at: make(map[uint64]common.Hash, len(deep))}
	for _, h := range deep {
		if h <= segment.top {
			segment.at[h] = c.hashes[h-c.from]
		}
	}
	return segment, err
}

// extend adds read (the headers above what is proven, in order) while each links to the one
// below. It reports whether all did: a header missing (an endpoint not there yet) stops this
// pass; one that does not link (a backend on another branch, behind a load balancer) drops
// what was proven, to start again at the next pass.
func (c *catchUp) extend(read []*services.BlockHeader) bool {
	for _, header := range read {
		if header == nil {
			return false
		}
		if len(c.hashes) > 0 && header.ParentHash != c.hashes[len(c.hashes)-1] {
			c.hashes = nil
			return false
		}
		c.hashes = append(c.hashes, header.Hash)
	}
	return true
}

// drop forgets what was proven when a pass found it does not hold (another block at its top,
// or a header above it that does not link to it), unless it has changed since.
func (c *catchUp) drop(segment catchUpSegment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.hashes) > 0 && c.from == segment.from && c.from+uint64(len(c.hashes))-1 == segment.top && c.hashes[len(c.hashes)-1] == segment.topHash {
		c.hashes = nil
	}
}
