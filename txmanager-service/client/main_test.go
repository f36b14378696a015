package txmclient_test

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// What the examples and tests reach: one real txmanager-service (TLS, API keys, embedded
// chain, a database of its own) for the whole test binary. In a caller's code these are
// its configuration.
var (
	grpcAddr  string // the service's gRPC address, e.g. "txmanager.internal:9090"
	caFile    string // the CA that issued the service's certificate (PEM)
	apiKey    string // an API key granted the signer
	adminKey  string // an API key with the admin grant (operators' calls)
	devKey    string // an API key granted the signer alone
	signer    = servicetest.DevSigner
	recipient = servicetest.Recipient
)

func TestMain(m *testing.M) {
	service, err := servicetest.Start("client")
	if err != nil {
		if errors.Is(err, servicetest.ErrNoDatabase) && os.Getenv(servicetest.EnvSkip) == "1" {
			fmt.Printf("%s=1: the client's tests and examples need a real service and did not run: %v\n", servicetest.EnvSkip, err)
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "txmclient tests: start txmanager-service:", err)
		os.Exit(1)
	}
	grpcAddr, caFile, apiKey, adminKey, devKey = service.GRPCAddr, service.CAFile, service.APIKey, service.AdminKey, service.DevSignerKey
	code := m.Run()
	if err := service.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "txmclient tests: stop txmanager-service:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}
