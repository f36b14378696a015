package telemetry_test

import (
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

func TestWindowMaxKeepsASpikeForTheWindow(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	w := telemetry.NewWindowMax(30*time.Second, 6, func() time.Time { return now })
	steps := []struct {
		advance time.Duration
		observe float64 // negative: nothing observed
		want    float64
	}{
		{0, -1, 0},
		{0, 0.029, 0.029},
		{6 * time.Second, 0.004, 0.029},
		{10 * time.Second, 0, 0.029}, // later idle rounds do not hide it
		{10 * time.Second, -1, 0.029},
		{5 * time.Second, -1, 0.004}, // 31 s after the spike: gone, the later 4 ms one remains
		{6 * time.Second, -1, 0},
		{time.Hour, 0.5, 0.5},
	}
	for i, s := range steps {
		now = now.Add(s.advance)
		if s.observe >= 0 {
			w.Observe(s.observe)
		}
		if got := w.Max(); got != s.want {
			t.Errorf("step %d (+%s): Max = %v, want %v", i, s.advance, got, s.want)
		}
	}
}
