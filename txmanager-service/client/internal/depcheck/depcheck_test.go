// Package depcheck proves what the core client costs a caller: a module outside this
// repository's workspace that uses it, resolved from the module proxy as a caller's would
// be, must not build pgx, lingo-utils, Wire or go-ethereum.
package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// forbidden are the packages only the service, or the feed consumer, may pull in.
var forbidden = []string{"github.com/jackc/pgx", "github.com/bionicotaku/lingo-utils", "github.com/google/wire", "github.com/ethereum/go-ethereum"}

const callerMain = `package main

import (
	"context"
	"fmt"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

func main() {
	ctx := context.Background()
	client, closeClient, err := txmclient.New(ctx, txmclient.Config{Endpoints: []string{"127.0.0.1:9090"}})
	if err != nil {
		panic(err)
	}
	defer closeClient()
	created, err := client.Create(ctx, &v1.CreateTxRequest{Signer: "0x06497E1D26D6C5A126E29FFbb240F267C4851c42", RequestId: "r-1"})
	if err == nil {
		_, err = client.Wait(ctx, created.GetTx().GetTxId())
	}
	fmt.Println(v1.IsNotFound(err), client.Watch(ctx, "", func(context.Context, *v1.Completion) error { return nil }))
}
`

func TestCoreClientPullsNoServerDependencies(t *testing.T) {
	root, err := filepath.Abs("../../..") // txmanager-service/
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	goMod := "module example.com/caller\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/bionicotaku/txmanager-service/api v0.0.0\n\tgithub.com/bionicotaku/txmanager-service/client v0.0.0\n)\n\n" +
		"replace (\n\tgithub.com/bionicotaku/txmanager-service/api => " + filepath.Join(root, "api") +
		"\n\tgithub.com/bionicotaku/txmanager-service/client => " + filepath.Join(root, "client") + "\n)\n"
	// The caller's checksums are the client's and the API's own: tidy verifies the modules
	// against them instead of asking the checksum database (CI runs with the network cut).
	var sums []string
	for _, module := range []string{"client", "api"} {
		body, err := os.ReadFile(filepath.Join(root, module, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, strings.Split(strings.TrimSpace(string(body)), "\n")...)
	}
	slices.Sort(sums)
	goSum := strings.Join(slices.Compact(sums), "\n") + "\n"
	for name, body := range map[string]string{"go.mod": goMod, "go.sum": goSum, "main.go": callerMain} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		// Outside the workspace, as a caller's module is; the proxy resolves the rest.
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	goCmd("mod", "tidy")
	deps := goCmd("list", "-deps", "./...")
	for _, dep := range strings.Fields(deps) {
		for _, f := range forbidden {
			if strings.HasPrefix(dep, f) {
				t.Errorf("a caller of the core client builds %s", dep)
			}
		}
	}
	goCmd("build", "./...")
	built := map[string]bool{}
	for _, m := range strings.Fields(goCmd("list", "-deps", "-f", "{{with .Module}}{{.Path}}{{end}}", "./...")) {
		built[m] = true
	}
	graph := strings.Count(goCmd("list", "-m", "all"), "\n")
	t.Logf("a caller of the core client builds %d packages from %d modules (its module graph lists %d); none of %v",
		strings.Count(deps, "\n"), len(built), graph, forbidden)
}
