package server

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

func TestListenBindsPortZeroAndRecordsTheBoundPorts(t *testing.T) {
	c := &conf.Bootstrap{Server: conf.Server{HTTP: conf.HTTPListener{Listener: conf.Listener{Addr: "127.0.0.1:0"}}, GRPC: conf.Listener{Addr: "127.0.0.1:0"}}}
	l, err := Listen(c)
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	for name, got := range map[string]struct {
		configured string
		listener   net.Listener
	}{"http": {c.Server.HTTP.Addr, l.HTTP}, "grpc": {c.Server.GRPC.Addr, l.GRPC}} {
		if got.configured != got.listener.Addr().String() || strings.HasSuffix(got.configured, ":0") {
			t.Errorf("%s: config says %q, socket is bound to %s", name, got.configured, got.listener.Addr())
		}
		conn, err := net.Dial("tcp", got.configured)
		if err != nil {
			t.Errorf("%s: nothing accepts at the recorded address: %v", name, err)
			continue
		}
		_ = conn.Close()
	}
	if err := l.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Errorf("second Close (as after the servers closed the sockets): %v", err)
	}
}

func TestListenOnABusyPortFailsAndReleasesTheOtherSocket(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	freeAddr := free.Addr().String()
	_ = free.Close()

	c := &conf.Bootstrap{Server: conf.Server{HTTP: conf.HTTPListener{Listener: conf.Listener{Addr: freeAddr}}, GRPC: conf.Listener{Addr: busy.Addr().String()}}}
	_, err = Listen(c)
	if err == nil || !strings.Contains(err.Error(), "server.grpc.addr") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Listen on a busy gRPC port: %v, want an error naming server.grpc.addr and the port in use", err)
	}
	// The HTTP socket bound first must have been released.
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("HTTP address still held after the failed start: %v", err)
	}
	_ = again.Close()
	if port := busy.Addr().(*net.TCPAddr).Port; !strings.HasSuffix(c.Server.GRPC.Addr, ":"+strconv.Itoa(port)) {
		t.Errorf("config changed by a failed Listen: %q", c.Server.GRPC.Addr)
	}
}
