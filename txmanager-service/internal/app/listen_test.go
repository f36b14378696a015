package app_test

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A configured port 0 becomes the kernel's choice in the configuration, and a node id
// derived from the gRPC address follows it; an id an operator set stays as set.
func TestListenRecordsTheBoundPorts(t *testing.T) {
	tests := []struct {
		name     string
		nodeYAML string
		// wantID is the node id expected once the gRPC port is known.
		wantID func(grpcPort string) string
	}{
		{name: "derived node id", wantID: func(grpcPort string) string { hostname, _ := os.Hostname(); return hostname + ":" + grpcPort }},
		{name: "configured node id", nodeYAML: "node:\n  id: node-a\n", wantID: func(string) string { return "node-a" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			yaml := "server:\n  http:\n    addr: 127.0.0.1:0\n  grpc:\n    addr: 127.0.0.1:0\n" + tt.nodeYAML
			if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
				t.Fatal(err)
			}
			bc, err := conf.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			l, err := app.Listen(bc)
			if err != nil {
				t.Fatalf("Listen: %v", err)
			}
			defer l.Close()
			for name, got := range map[string]struct {
				configured string
				listener   net.Listener
			}{"http": {bc.Server.HTTP.Addr, l.HTTP}, "grpc": {bc.Server.GRPC.Addr, l.GRPC}} {
				if got.configured != got.listener.Addr().String() || strings.HasSuffix(got.configured, ":0") {
					t.Errorf("%s: configuration says %q, socket is bound to %s", name, got.configured, got.listener.Addr())
				}
			}
			_, grpcPort, _ := net.SplitHostPort(l.GRPC.Addr().String())
			if want := tt.wantID(grpcPort); bc.Node.ID != want {
				t.Errorf("node id %q, want %q", bc.Node.ID, want)
			}
		})
	}
}
