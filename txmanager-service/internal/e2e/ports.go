package e2e

import (
	"fmt"
	"net"
	"os"
	"strconv"
)

// FreeAddr is a loopback host:port nothing listens on right now. Another process could
// take it before ours binds it; on loopback, in a test run, that window has not mattered.
func FreeAddr() (string, error) {
	port, err := FreePort()
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
}

// FreePort is FreeAddr's port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
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
