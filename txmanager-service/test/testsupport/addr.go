package testsupport

import (
	"net"
	"syscall"
	"testing"
)

// RefusingAddr returns a loopback host:port where a connection is refused, and keeps it
// that way until the test ends. The port is held by a socket that is bound but never
// listens: the kernel answers every connection with a reset, and no other process or test
// can be given the port in the meantime (a listener opened and closed again would free it
// for the next server that asks for port 0).
func RefusingAddr(t testing.TB) string {
	t.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("refusing address: socket: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatalf("refusing address: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatalf("refusing address: getsockname: %v", err)
	}
	in4, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		t.Fatalf("refusing address: bound to %T, want IPv4", sa)
	}
	return (&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: in4.Port}).String()
}
