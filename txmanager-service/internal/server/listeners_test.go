package server

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

func TestListenBindsPortZeroAndReportsTheBoundPorts(t *testing.T) {
	l, err := Listen(conf.Server{HTTP: conf.HTTPListener{Listener: conf.Listener{Addr: "127.0.0.1:0"}}, GRPC: conf.Listener{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatalf("Listen: %v", err)
	}
	defer l.Close()
	httpPort, grpcPort := l.Ports()
	for name, got := range map[string]struct {
		port     int
		listener net.Listener
	}{"http": {httpPort, l.HTTP}, "grpc": {grpcPort, l.GRPC}} {
		if got.port == 0 || got.listener.Addr().(*net.TCPAddr).Port != got.port {
			t.Errorf("%s: Ports says %d, socket is bound to %s", name, got.port, got.listener.Addr())
		}
		conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(got.port)))
		if err != nil {
			t.Errorf("%s: nothing accepts at the reported port: %v", name, err)
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

	_, err = Listen(conf.Server{HTTP: conf.HTTPListener{Listener: conf.Listener{Addr: freeAddr}}, GRPC: conf.Listener{Addr: busy.Addr().String()}})
	if err == nil || !strings.Contains(err.Error(), "server.grpc.addr") || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("Listen on a busy gRPC port: %v, want an error naming server.grpc.addr and the port in use", err)
	}
	// The HTTP socket bound first must have been released.
	again, err := net.Listen("tcp", freeAddr)
	if err != nil {
		t.Fatalf("HTTP address still held after the failed start: %v", err)
	}
	_ = again.Close()
}
