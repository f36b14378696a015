package conf

import (
	"encoding/json"
	"errors"
	"time"
)

// Duration is a time.Duration written as "10s", "250ms" in configuration.
type Duration time.Duration

// Std returns the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// errNotADuration says what a duration looks like without repeating the value: time's own
// error quotes it, and a value in the wrong place may be a secret.
var errNotADuration = errors.New("must be a duration such as 250ms, 10s or 1m30s")

// UnmarshalJSON accepts a duration string, or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		parsed, err := time.ParseDuration(s)
		if err != nil {
			return errNotADuration
		}
		*d = Duration(parsed)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return errNotADuration
	}
	*d = Duration(n)
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }
