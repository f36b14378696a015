package e2e

import (
	"fmt"
	"slices"
)

// NonceReport is how one signer's nonces compare with the contiguous run 0..want-1 that a
// transaction manager must produce: no gaps (a gap stalls every later transaction) and no
// reuse (a reused nonce means two intents competed for one slot and one was lost).
type NonceReport struct {
	Distinct   int
	Missing    []uint64
	Duplicates []uint64
	// OutOfRange are nonces at or above want: the manager used more slots than intents.
	OutOfRange []uint64
}

// CheckNonces compares nonces with 0..want-1.
func CheckNonces(nonces []uint64, want uint64) NonceReport {
	seen := make(map[uint64]int, len(nonces))
	for _, n := range nonces {
		seen[n]++
	}
	var r NonceReport
	r.Distinct = len(seen)
	for n, count := range seen {
		if count > 1 {
			r.Duplicates = append(r.Duplicates, n)
		}
		if n >= want {
			r.OutOfRange = append(r.OutOfRange, n)
		}
	}
	for n := range want {
		if seen[n] == 0 {
			r.Missing = append(r.Missing, n)
		}
	}
	slices.Sort(r.Duplicates)
	slices.Sort(r.OutOfRange)
	return r
}

// OK reports exactly 0..want-1, each once.
func (r NonceReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Duplicates) == 0 && len(r.OutOfRange) == 0
}

func (r NonceReport) String() string {
	if r.OK() {
		return fmt.Sprintf("%d distinct, contiguous", r.Distinct)
	}
	return fmt.Sprintf("%d distinct, missing %s, duplicated %s, out of range %s",
		r.Distinct, abbreviate(r.Missing), abbreviate(r.Duplicates), abbreviate(r.OutOfRange))
}

// abbreviate keeps error messages short when a whole range is wrong.
func abbreviate(ns []uint64) string {
	const show = 8
	if len(ns) <= show {
		return fmt.Sprint(ns)
	}
	return fmt.Sprintf("%v... (%d)", ns[:show], len(ns))
}
