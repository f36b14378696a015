package chain

import (
	"errors"
	"reflect"

	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/rpc"
)

// rpcClientOf digs the *rpc.Client out of a simulated backend's client. The backend wraps
// *ethclient.Client in a struct whose embedded field is named Client, and that field
// shadows ethclient's Client() method, so no interface assertion can reach it. The field
// itself is exported, so reflection may read it; go-ethereum is pinned, and a layout change
// surfaces here as an error rather than a panic.
func rpcClientOf(client simulated.Client) (*rpc.Client, error) {
	value := reflect.ValueOf(client)
	if value.Kind() != reflect.Struct {
		return nil, errors.New("simulated backend client is not the expected struct")
	}
	field := value.FieldByName("Client")
	if !field.IsValid() || !field.CanInterface() {
		return nil, errors.New("simulated backend client has no accessible Client field")
	}
	ethClient, ok := field.Interface().(*ethclient.Client)
	if !ok || ethClient == nil {
		return nil, errors.New("simulated backend client does not wrap an *ethclient.Client")
	}
	return ethClient.Client(), nil
}
