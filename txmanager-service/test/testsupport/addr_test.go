package testsupport_test

import (
	"errors"
	"net"
	"syscall"
	"testing"

	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

func TestRefusingAddrRefusesAndHoldsItsPort(t *testing.T) {
	addr := testsupport.RefusingAddr(t)
	if _, err := net.Dial("tcp", addr); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial %s: %v, want connection refused", addr, err)
	}
	if l, err := net.Listen("tcp", addr); err == nil {
		_ = l.Close()
		t.Fatalf("listened on %s while it was held", addr)
	}
}
