package app

import (
	"fmt"
	"io"
	"strings"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

// Banner tells a developer where the service listens and how to try it.
type Banner struct {
	version                         services.BuildVersion
	httpAddr, grpcAddr, node, chain string
	example                         string
}

// NewBanner prepares the start-up message.
func NewBanner(bc *conf.Bootstrap, registry *signer.Registry, stacks ChainStacks, version services.BuildVersion) *Banner {
	descriptions := make([]string, len(stacks))
	for i, stack := range stacks {
		descriptions[i] = stack.Connection.Description
	}
	b := &Banner{version: version, httpAddr: bc.Server.HTTP.Addr, grpcAddr: bc.Server.GRPC.Addr, node: bc.Node.ID, chain: strings.Join(descriptions, "\n        ")}
	if addrs := registry.Addresses(); len(addrs) > 0 {
		from, to := addrs[0], addrs[len(addrs)-1]
		// With several chains a create names its chain.
		chainField, chainQuery := "", ""
		if len(stacks) > 1 {
			id := stacks[0].Services.ID
			chainField, chainQuery = fmt.Sprintf(`"chainId":%d,`, id), fmt.Sprintf("&chainId=%d", id)
		}
		b.example = fmt.Sprintf(`curl -s -X POST http://%s/api/v1/tx -H 'Content-Type: application/json' \
    -d '{%s"signer":"%s","to":"%s","value":"1000000000000000","gasLimit":21000,"requestId":"hello-1"}'
  curl -s http://%s/api/v1/tx/<txId from the answer>
  curl -s 'http://%s/api/v1/tx/by-request?signer=%s&requestId=hello-1%s'`,
			b.httpAddr, chainField, from.Hex(), to.Hex(), b.httpAddr, b.httpAddr, from.Hex(), chainQuery)
	}
	return b
}

// Print writes the banner.
func (b *Banner) Print(w io.Writer) {
	fmt.Fprintf(w, "\ntxmanager-service %s is up (node %s)\n  HTTP  http://%s\n  gRPC  %s\n  chain %s\n",
		b.version, b.node, b.httpAddr, b.grpcAddr, b.chain)
	if b.example != "" {
		fmt.Fprintf(w, "try:\n  %s\n", b.example)
	}
	fmt.Fprintln(w, "Ctrl-C stops the service and everything it started.")
}
