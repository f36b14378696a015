package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The reference covers every key the service reads, each with a meaning, and what is
// committed in docs/configuration.md is what the types and defaults say today.
func TestReferenceIsCompleteAndFresh(t *testing.T) {
	keys, err := Collect("..")
	if err != nil {
		t.Fatal(err)
	}
	if missing := Undocumented(keys); len(missing) > 0 {
		t.Errorf("keys without a meaning (write a comment beside the field or above the key): %v", missing)
	}
	paths := sortedPaths(keys)
	for _, want := range []string{"lease.duration", "database.dsn", "chains[].id", "signers.awsKms.keys[].id", "recovery.releaseWait", "pipeline.signingStall.maxUnsigned"} {
		if _, found := slices.BinarySearch(paths, want); !found {
			t.Errorf("the reference lacks %s", want)
		}
	}
	byPath := map[string]Key{}
	for _, k := range keys {
		byPath[k.Path] = k
	}
	for path, want := range map[string]Key{
		"server.http.addr": {Default: "127.0.0.1:8080", Env: "HTTP_ADDR"},
		"database.dsn":     {Env: "DATABASE_URL"},
		"lease.duration":   {Default: "10s"},
	} {
		if got := byPath[path]; got.Default != want.Default || got.Env != want.Env {
			t.Errorf("%s: default %q, environment %q; want %q, %q", path, got.Default, got.Env, want.Default, want.Env)
		}
	}
	committed, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(committed) != Render(keys) {
		t.Error("docs/configuration.md is stale: run `make generate`")
	}
}

func TestCleanCommentLeavesExamplesOut(t *testing.T) {
	got := cleanComment("# API keys: callers send X-API-Key.\n#   - id: billing-service\n#     sha256: <hex>\n")
	if got != "API keys: callers send X-API-Key." || strings.Contains(got, "billing") {
		t.Errorf("cleanComment = %q", got)
	}
}
