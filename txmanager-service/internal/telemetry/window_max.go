package telemetry

import (
	"sync"
	"time"
)

// WindowMax is the largest value observed in the last Window, for a gauge that must show a
// short spike to a scraper that reads it every 15 or 30 seconds: a gauge of the latest value
// alone reads 0 between spikes, and a maximum reset on each read would hide it from every
// scraper but the first. It keeps one maximum per slot of Window/slots.
type WindowMax struct {
	mu       sync.Mutex
	slotSize time.Duration
	slots    []windowSlot
	now      func() time.Time
}

type windowSlot struct {
	index int64 // which slot of time this is (unix time / slot size)
	max   float64
}

// NewWindowMax keeps the maximum over window, in slots parts.
func NewWindowMax(window time.Duration, slots int, now func() time.Time) *WindowMax {
	if now == nil {
		now = time.Now
	}
	return &WindowMax{slotSize: window / time.Duration(slots), slots: make([]windowSlot, slots), now: now}
}

// Observe records v now.
func (w *WindowMax) Observe(v float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	index := w.now().UnixNano() / int64(w.slotSize)
	slot := &w.slots[index%int64(len(w.slots))]
	if slot.index != index {
		*slot = windowSlot{index: index}
	}
	slot.max = max(slot.max, v)
}

// Max is the largest value observed within the window (0 when none was).
func (w *WindowMax) Max() float64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	index := w.now().UnixNano() / int64(w.slotSize)
	out := 0.0
	for _, s := range w.slots {
		if s.index > index-int64(len(w.slots)) && s.index <= index {
			out = max(out, s.max)
		}
	}
	return out
}
