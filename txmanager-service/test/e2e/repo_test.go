package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFindRepo(t *testing.T) {
	// Not parallel: the cases without -repo start from the working directory.
	root := t.TempDir()
	for _, name := range []string{"go.work", "txmanager-service/go.mod"} {
		path := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	deep := filepath.Join(root, "txmanager-service", "test", "cmd", "txm-e2e")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	markers := []string{"go.work", filepath.Join("txmanager-service", "go.mod")}
	tests := []struct {
		name    string
		wd      string
		flag    string
		markers []string
		want    string
		wantErr string
	}{
		{name: "from the root", wd: root, markers: markers, want: root},
		{name: "from a folder below it", wd: deep, markers: markers, want: root},
		{name: "-repo names it", wd: t.TempDir(), flag: root, markers: markers, want: root},
		{name: "-repo lacks a marker", wd: root, flag: deep, markers: markers, wantErr: "-repo " + deep + " lacks go.work"},
		{name: "no root above", wd: t.TempDir(), markers: markers, wantErr: "no monorepo root"},
		{name: "a marker missing everywhere", wd: deep, markers: []string{"go.work", "examples/payouts/go.mod"}, wantErr: "no monorepo root"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(tc.wd)
			got, err := FindRepo(tc.flag, tc.markers...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want an error with %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
