package domain

// NextNonce is max(chain, cache, db), the first nonce to allocate next
// (docs/design.md#nonce-allocation). Absent sources (nil) do not vote. Taking the maximum
// is what makes nonces never go backwards: a stale cache, a lagging chain view or a cursor
// written by a previous owner can only make the answer larger, never reuse a nonce.
func NextNonce(chainPending, cached, dbCursor *uint64) uint64 {
	var next uint64
	for _, source := range []*uint64{chainPending, cached, dbCursor} {
		if source != nil && *source > next {
			next = *source
		}
	}
	return next
}
