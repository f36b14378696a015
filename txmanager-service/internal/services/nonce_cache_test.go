package services_test

import (
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

type serverEpoch struct{ epoch uint64 }

func (s *serverEpoch) ServerEpoch() uint64 { return s.epoch }

// The cache never serves a nonce from another database server than the one now: after a
// failover the cursor may have gone back, and only the chain can say by how much.
func TestNonceCacheForgetsAnotherServersNonces(t *testing.T) {
	server := &serverEpoch{}
	c := services.NewNonceCache(server)
	at := time.Unix(100, 0)
	steps := []struct {
		name     string
		do       func()
		wantNext uint64
		wantOK   bool
	}{
		{"empty", func() {}, 0, false},
		{"after a batch", func() { c.Put("a", 7, at, c.Epoch()) }, 7, true},
		{"evicted on a failure", func() { c.Evict("a") }, 0, false},
		{"again", func() { c.Put("a", 9, at, c.Epoch()) }, 9, true},
		{"the server changed", func() { server.epoch++ }, 0, false},
		{"a batch that began on the old server records nothing", func() { c.Put("a", 12, at, server.epoch-1) }, 0, false},
		{"a batch on the new server", func() { c.Put("a", 13, at, c.Epoch()) }, 13, true},
	}
	for _, s := range steps {
		s.do()
		next, checked, ok := c.Get("a")
		if ok != s.wantOK || next != s.wantNext || (ok && !checked.Equal(at)) {
			t.Errorf("%s: Get = %d %v %v, want %d %v", s.name, next, checked, ok, s.wantNext, s.wantOK)
		}
	}
}
