package chain

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
)

type simulatedOption = func(*node.Config, *ethconfig.Config)

// freePortAttempts bounds retries when a port picked as free is taken by someone else
// before the node binds it.
const freePortAttempts = 3

// startBackend starts the simulated node, serving HTTP on httpAddr when it is set, and
// returns the endpoint URL ("" without HTTP).
func startBackend(alloc types.GenesisAlloc, options []simulatedOption, httpAddr string) (*simulated.Backend, string, error) {
	if httpAddr == "" {
		backend, err := newBackend(alloc, options)
		return backend, "", err
	}
	host, portText, err := net.SplitHostPort(httpAddr)
	if err != nil {
		return nil, "", fmt.Errorf("HTTPAddr %q: %w", httpAddr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, "", fmt.Errorf("HTTPAddr %q: invalid port", httpAddr)
	}
	attempts := 1
	if port == 0 {
		attempts = freePortAttempts
	}
	var errs []error
	for range attempts {
		// The node cannot report the port it bound (the backend keeps its node private),
		// so for port 0 a free port is chosen here and handed to the node.
		bindPort := port
		if bindPort == 0 {
			if bindPort, err = freePort(host); err != nil {
				return nil, "", err
			}
		}
		backend, err := newBackend(alloc, append(options, withHTTP(host, bindPort)))
		if err == nil {
			return backend, "http://" + net.JoinHostPort(host, strconv.Itoa(bindPort)), nil
		}
		errs = append(errs, err)
	}
	return nil, "", errors.Join(errs...)
}

// newBackend turns simulated.NewBackend's panics into errors: it panics when the node
// fails to start, which a busy HTTP port makes an ordinary runtime failure.
func newBackend(alloc types.GenesisAlloc, options []simulatedOption) (backend *simulated.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start simulated node: %v", r)
		}
	}()
	return simulated.NewBackend(alloc, options...), nil
}

func withHTTP(host string, port int) simulatedOption {
	return func(nodeConf *node.Config, _ *ethconfig.Config) {
		nodeConf.HTTPHost = host
		nodeConf.HTTPPort = port
		// The default modules leave out eth, which is the whole point here.
		nodeConf.HTTPModules = []string{"eth", "net", "web3"}
		// Requests addressed by IP pass geth's virtual-host check anyway; a name does not
		// unless listed.
		nodeConf.HTTPVirtualHosts = []string{"localhost", host}
	}
}

func freePort(host string) (int, error) {
	listener, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("find a free port on %s: %w", host, err)
	}
	defer listener.Close()
	return listener.Addr().(*net.TCPAddr).Port, nil
}
