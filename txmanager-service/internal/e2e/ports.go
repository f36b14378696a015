package e2e

import (
	"fmt"
	"net"
	"os"
)

// FreeAddr is a loopback host:port nothing listens on right now. Another process could
// take it before ours binds it; on loopback, in a test run, that window has not mattered.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// FreePort is FreeAddr's port.
func FreePort() (int, error) {
	addr, err := FreeAddr()
	if err != nil {
		return 0, err
	}
	_, port, _ := net.SplitHostPort(addr)
	var n int
	_, err = fmt.Sscan(port, &n)
	return n, err
}

// ownedDir returns dir, creating it; when dir is empty it makes a temporary folder and
// reports that the caller owns it (and must remove it).
func ownedDir(dir, pattern string) (path string, owned bool, err error) {
	if dir == "" {
		path, err = os.MkdirTemp("", pattern)
		if err != nil {
			return "", false, fmt.Errorf("temp dir: %w", err)
		}
		return path, true, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, false, nil
}
