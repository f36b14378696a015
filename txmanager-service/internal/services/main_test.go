package services_test

import (
	"math/big"
	"testing"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testChain is the chain the tests' repositories serve: the embedded chain's id.
func testChain() services.ChainID { return services.ChainID{Int: big.NewInt(1337)} }
