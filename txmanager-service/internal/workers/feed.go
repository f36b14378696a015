package workers

import (
	"context"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// FeedSequencerLoop gives committed completions written without a position their feed
// positions, and wakes this node's long-polls when the feed moved, every interval and at
// once when woken (after a finality pass on this node).
type FeedSequencerLoop struct {
	*Loop
	sequencer *services.FeedSequencer
	log       *log.Helper
}

// NewFeedSequencerLoop builds the loop.
func NewFeedSequencerLoop(c Intervals, sequencer *services.FeedSequencer, logger log.Logger) *FeedSequencerLoop {
	f := &FeedSequencerLoop{sequencer: sequencer, log: log.NewHelper(log.With(logger, "component", "feed-sequencer"))}
	f.Loop = NewLoop(c.FeedSequence, f.round)
	return f
}

// round positions everything committed so far, a round at a time.
func (f *FeedSequencerLoop) round(ctx context.Context) {
	for ctx.Err() == nil {
		_, more, err := f.sequencer.Round(ctx)
		if err != nil {
			if ctx.Err() == nil {
				f.log.Warnw("msg", "feed sequencer round failed", "error", err.Error())
			}
			return
		}
		if !more {
			return
		}
	}
}
