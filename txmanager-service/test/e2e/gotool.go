package e2e

import (
	"context"
	"debug/buildinfo"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
)

// InstallGoTool puts the command pkg at module version into binDir with `go install`
// from the Go module proxy, unless binDir already holds a binary built from exactly that
// package and version (read from the binary's build information). It returns the binary's
// path. The first build of a large command takes minutes; later calls cost a file read.
// The suites (make e2e, chaos-chain, bench-chain) build with it as they start; tests never
// do: they find what `make test-binaries` built (FindTestBinary).
func InstallGoTool(ctx context.Context, binDir, pkg, version string) (string, error) {
	// go install wants an absolute GOBIN, and callers pass folders relative to where they run.
	binDir, err := filepath.Abs(binDir)
	if err != nil {
		return "", fmt.Errorf("install %s: %w", pkg, err)
	}
	bin := filepath.Join(binDir, path.Base(pkg))
	if info, err := buildinfo.ReadFile(bin); err == nil && info.Path == pkg && info.Main.Version == version {
		return bin, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("install %s: %w", pkg, err)
	}
	cmd := exec.CommandContext(ctx, "go", "install", pkg+"@"+version)
	// go install pkg@version builds outside any workspace; GOWORK=off keeps an exported
	// GOWORK (the Makefile sets one) from getting in the way.
	cmd.Env = append(os.Environ(), "GOBIN="+binDir, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s@%s: %w\n%s", pkg, version, err, out)
	}
	return bin, nil
}

// TestBinariesTarget is the make target that builds the programs tests run (clef,
// local-kms) into TestBinDir.
const TestBinariesTarget = "make test-binaries"

// TestBinDir is the folder under the monorepo's root where TestBinariesTarget puts the
// programs tests run; the Makefile's TEST_BIN names the same folder.
const TestBinDir = "bin/testbin"

// FindTestBinary is the command pkg at module version in the monorepo's TestBinDir (the
// root found from the working directory), checked by the binary's build information. Tests
// only look: a missing or other binary fails them naming TestBinariesTarget, so that a test
// run installs nothing and downloads nothing (make test passes with GOPROXY=off).
func FindTestBinary(pkg, version string) (string, error) {
	root, err := FindRepo("", "go.work")
	if err != nil {
		return "", err
	}
	return findTestBinary(root, pkg, version)
}

// findTestBinary is FindTestBinary in the monorepo at root.
func findTestBinary(root, pkg, version string) (string, error) {
	bin := filepath.Join(root, TestBinDir, path.Base(pkg))
	info, err := buildinfo.ReadFile(bin)
	if err != nil {
		return "", fmt.Errorf("%s %s is not built (%w): run `%s`", pkg, version, err, TestBinariesTarget)
	}
	if info.Path != pkg || info.Main.Version != version {
		return "", fmt.Errorf("%s is %s %s, the tests need %s %s: run `%s`",
			bin, info.Path, info.Main.Version, pkg, version, TestBinariesTarget)
	}
	return bin, nil
}
