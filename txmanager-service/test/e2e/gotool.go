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

// RepoBinDir is the monorepo's bin folder (the root found from the working directory),
// where the suites keep the tools they build; tests use it to share one build.
func RepoBinDir() (string, error) {
	root, err := FindRepo("", "go.work")
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}
