package services

import (
	"sync"
	"time"
)

// NonceCache is the node-local "cache" term of max(chain, cache, db): the next nonce per
// signer after this node's last committed batch, and when the chain was last consulted.
// Entries are only written after a commit and are evicted on any failure or fencing, so the
// cache is never ahead of what the database holds for this node's lease, as long as the
// database keeps what it committed. A failover to a standby that missed the last commits
// breaks that: the cache would then hand out nonces above a cursor that went back, and skip
// the chain query that shows the chain ahead of the database. So entries belong to one
// database server epoch, and a new server (see DatabaseServerEpoch) voids them all.
type NonceCache struct {
	mu      sync.Mutex
	entries map[string]nonceEntry
	server  DatabaseServerEpoch
}

// DatabaseServerEpoch counts the database servers the pool has been connected to: it moves
// when a new connection lands on another server than the previous one (a failover, a
// switchover, a restart), after which nothing cached from the old one is trusted.
type DatabaseServerEpoch interface {
	ServerEpoch() uint64
}

type nonceEntry struct {
	next           uint64
	chainCheckedAt time.Time
	epoch          uint64
}

// NewNonceCache returns an empty cache whose entries last while the database server does
// (server nil: one server for ever, for tests of the cache alone).
func NewNonceCache(server DatabaseServerEpoch) *NonceCache {
	return &NonceCache{entries: map[string]nonceEntry{}, server: server}
}

// Epoch is the database server epoch now; a batch reads it before it reads the cache and
// hands it to Put.
func (c *NonceCache) Epoch() uint64 {
	if c.server == nil {
		return 0
	}
	return c.server.ServerEpoch()
}

// Get returns the cached next nonce and when the chain was last consulted for it; an entry
// from an earlier database server is not returned.
func (c *NonceCache) Get(signer string) (next uint64, chainCheckedAt time.Time, ok bool) {
	epoch := c.Epoch()
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[signer]
	if ok && e.epoch != epoch {
		delete(c.entries, signer)
		return 0, time.Time{}, false
	}
	return e.next, e.chainCheckedAt, ok
}

// Put records the next nonce after a committed batch that began in epoch; a batch that
// began on an earlier server records nothing, as its commit may be what the new one lost.
func (c *NonceCache) Put(signer string, next uint64, chainCheckedAt time.Time, epoch uint64) {
	if epoch != c.Epoch() {
		c.Evict(signer)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[signer] = nonceEntry{next: next, chainCheckedAt: chainCheckedAt, epoch: epoch}
}

// Evict drops the signer's entry.
func (c *NonceCache) Evict(signer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, signer)
}
