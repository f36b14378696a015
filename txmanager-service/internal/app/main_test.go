package app

import (
	"testing"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

// The assembly's tests start whole nodes on a real PostgreSQL (a fresh database each);
// pgtest stops what it started once the binary's tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }
