package services

import (
	"sync"
	"time"
)

// NonceCache is the node-local "cache" term of max(chain, cache, db): the next nonce per
// signer after this node's last committed batch, and when the chain was last consulted.
// Entries are only written after a commit and are evicted on any failure or fencing, so the
// cache is never ahead of what the database holds for this node's lease.
type NonceCache struct {
	mu      sync.Mutex
	entries map[string]nonceEntry
}

type nonceEntry struct {
	next           uint64
	chainCheckedAt time.Time
}

// NewNonceCache returns an empty cache.
func NewNonceCache() *NonceCache { return &NonceCache{entries: map[string]nonceEntry{}} }

// Get returns the cached next nonce and when the chain was last consulted for it.
func (c *NonceCache) Get(signer string) (next uint64, chainCheckedAt time.Time, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[signer]
	return e.next, e.chainCheckedAt, ok
}

// Put records the next nonce after a committed batch.
func (c *NonceCache) Put(signer string, next uint64, chainCheckedAt time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[signer] = nonceEntry{next: next, chainCheckedAt: chainCheckedAt}
}

// Evict drops the signer's entry.
func (c *NonceCache) Evict(signer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, signer)
}
