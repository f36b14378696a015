package conf

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written as "10s", "250ms" in configuration.
type Duration time.Duration

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalJSON accepts a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		parsed, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q: %w", s, err)
		}
		*d = Duration(parsed)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("invalid duration %s", b)
	}
	*d = Duration(n)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
