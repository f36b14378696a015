// Package architecture checks the shape docs/design.md#where-the-code-lives describes: every
// package of the service has a layer, and no package imports one of a layer above its own.
package architecture

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/bionicotaku/txmanager-service/"

// layers ranks the service's packages: a package may import its own layer and those below.
// domain knows nothing of ours; the use cases (services) own the ports; the chain and key
// adapters implement them; the stages drive them; the database adapter implements the use
// cases' and the stages' store ports; the loops run the stages; the transports map requests
// to use cases; app assembles everything.
var layers = map[string]int{
	"internal/domain":    0,
	"internal/conf":      0,
	"internal/telemetry": 0,
	"internal/services":  1,
	// Adapters of the chain and the keys.
	"internal/chain":  2,
	"internal/signer": 2,
	// Stages: what happens to a create and a transaction. Each owns the narrow store port it
	// writes through.
	"internal/writer":              2,
	"internal/pipeline":            2,
	"internal/pipeline/submitting": 3,
	"internal/pipeline/receipts":   3,
	"internal/pipeline/reconcile":  3,
	"internal/pipeline/stuck":      3,
	// The database adapter implements the use cases' and the stages' store ports.
	"internal/repositories/sqlcdb": 2,
	"internal/repositories":        4,
	"internal/workers":             4,
	"internal/controllers":         4,
	"internal/server":              5,
	// The console is a transport beside the HTTP server: pages over the controllers.
	"internal/console":      5,
	"internal/app":          6,
	"cmd/txmanager-service": 7,
	"internal/conf/confdoc": 1, // a generator: conf and nothing else of ours
}

// imports lists each package of the service with the service's packages it imports.
func imports(t *testing.T) map[string][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./internal/...", "./cmd/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		var ours []string
		for _, imp := range fields[1:] {
			if rest, ok := strings.CutPrefix(imp, module); ok && !strings.HasPrefix(rest, "api/") {
				ours = append(ours, rest)
			}
		}
		graph[pkg] = ours
	}
	return graph
}

func TestNoPackageImportsALayerAbove(t *testing.T) {
	graph := imports(t)
	if len(graph) < len(layers)-2 {
		t.Fatalf("go list found %d packages: the check would read nothing", len(graph))
	}
	for pkg, deps := range graph {
		rank, known := layers[pkg]
		if !known {
			t.Errorf("%s has no layer: place it in layers (and docs/design.md)", pkg)
			continue
		}
		for _, dep := range deps {
			if depRank, ok := layers[dep]; ok && depRank > rank {
				t.Errorf("%s (layer %d) imports %s (layer %d), a layer above it", pkg, rank, dep, depRank)
			}
		}
	}
	// The use cases never reach a loop or a stage: those drive them through their ports.
	for _, dep := range graph["internal/services"] {
		if slices.Contains([]string{"internal/workers", "internal/writer"}, dep) || strings.HasPrefix(dep, "internal/pipeline") {
			t.Errorf("internal/services imports %s", dep)
		}
	}
}

// wholeConfiguration are the packages that may see the whole configuration file
// (conf.Bootstrap): the assembly and the program. Every other package takes its own
// section, so a package's constructor says which settings it reads.
var wholeConfiguration = []string{"internal/app", "internal/conf", "internal/conf/confdoc", "cmd/txmanager-service"}

func TestOnlyTheAssemblySeesTheWholeConfiguration(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	checked := 0
	for pkg := range imports(t) {
		if slices.Contains(wholeConfiguration, pkg) {
			continue
		}
		dir := filepath.Join(root, pkg)
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			name := e.Name()
			if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(f, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Bootstrap" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "conf" {
						t.Errorf("%s/%s uses conf.Bootstrap: take the section the package reads", pkg, name)
					}
				}
				return true
			})
		}
	}
	if checked < 50 {
		t.Fatalf("read %d files: the check would read nothing", checked)
	}
}
