package main

import (
	"testing"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

// The checker's database tests clone a migrated template pgtest builds once per test
// binary; pgtest.Main drops it when the binary ends.
func TestMain(m *testing.M) { pgtest.Main(m) }
