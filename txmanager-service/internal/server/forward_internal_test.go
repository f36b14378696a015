package server

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Connections to peers are reused while used and closed once idle past the limit, so a
// forwarder does not collect connections to pods that are gone.
func TestForwarderTrimsIdleConnections(t *testing.T) {
	f := &Forwarder{conns: map[string]*peerConn{}, idleLimit: time.Minute}
	now := time.Now()
	for addr, idle := range map[string]time.Duration{"127.0.0.1:1": 2 * time.Minute, "127.0.0.1:2": 10 * time.Second} {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		f.conns[addr] = &peerConn{conn: conn, lastUsed: now.Add(-idle)}
	}
	f.trim(now)
	if _, kept := f.conns["127.0.0.1:2"]; !kept || len(f.conns) != 1 {
		t.Fatalf("after trimming: %v, want only the recently used peer", f.conns)
	}
	f.close()
}
