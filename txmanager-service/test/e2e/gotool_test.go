package e2e

import (
	"debug/buildinfo"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// A test finds a program only where `make test-binaries` put it, at the version it asks
// for; anything else is an error that names the target, never an install. The test binary
// itself stands in for a built program: its build information names its package and version.
func TestFindTestBinary(t *testing.T) {
	t.Parallel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	info, err := buildinfo.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	dir := filepath.Join(root, TestBinDir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// The program, and a "clef" that is this test binary rather than clef.
	for _, name := range []string{path.Base(info.Path), "clef"} {
		if err := os.Symlink(self, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "local-kms"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	const clef = "github.com/ethereum/go-ethereum/cmd/clef"
	for _, tc := range []struct {
		name, pkg, version string
		wantErr            string // empty: found
	}{
		{name: "built at the version asked for", pkg: info.Path, version: info.Main.Version},
		{name: "another version", pkg: info.Path, version: "v9.9.9", wantErr: "the tests need"},
		{name: "another program under the name", pkg: clef, version: "v1.17.3", wantErr: "the tests need " + clef},
		{name: "not a Go program", pkg: "github.com/nsmithuk/local-kms", version: "v0.0.0", wantErr: "is not built"},
		{name: "missing", pkg: "example.com/cmd/absent", version: "v1.0.0", wantErr: "is not built"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bin, err := findTestBinary(root, tc.pkg, tc.version)
			if tc.wantErr == "" {
				if err != nil || bin != filepath.Join(dir, path.Base(tc.pkg)) {
					t.Fatalf("findTestBinary = %q, %v; want the program in %s", bin, err, dir)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), TestBinariesTarget) {
				t.Fatalf("findTestBinary = %q, %v; want an error with %q naming %q", bin, err, tc.wantErr, TestBinariesTarget)
			}
		})
	}
}
