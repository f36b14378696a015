// Command confdoc writes the configuration reference (docs/configuration.md): every key the
// service reads, with its default, the environment variable that sets it, and what it
// means. The keys come from the configuration types (internal/conf), their meanings from the
// comments beside each field and above each key of the embedded defaults, the defaults and
// variables from defaults.yaml itself: the reference is derived, never written by hand, and
// `make check-generate` fails when it is stale.
//
//	go run ./txmanager-service/internal/conf/confdoc -conf txmanager-service/internal/conf > docs/configuration.md
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	dir := flag.String("conf", "txmanager-service/internal/conf", "the configuration package's folder (its Go files and defaults.yaml)")
	flag.Parse()
	keys, err := Collect(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "confdoc:", err)
		os.Exit(1)
	}
	if missing := Undocumented(keys); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "confdoc: %d keys have no meaning (a comment beside the field or above the key): %v\n", len(missing), missing)
		os.Exit(1)
	}
	if _, err := os.Stdout.WriteString(Render(keys)); err != nil {
		fmt.Fprintln(os.Stderr, "confdoc:", err)
		os.Exit(1)
	}
}
