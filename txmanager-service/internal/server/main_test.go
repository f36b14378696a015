package server

import (
	"testing"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
