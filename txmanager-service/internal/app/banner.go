package app

import (
	"fmt"
	"io"

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
func NewBanner(bc *conf.Bootstrap, registry *signer.Registry, conn *ChainConnection, version services.BuildVersion) *Banner {
	b := &Banner{version: version, httpAddr: bc.Server.HTTP.Addr, grpcAddr: bc.Server.GRPC.Addr, node: bc.Node.ID, chain: conn.Description}
	if addrs := registry.Addresses(); len(addrs) > 0 {
		from, to := addrs[0], addrs[len(addrs)-1]
		b.example = fmt.Sprintf(`curl -s -X POST http://%s/api/v1/tx -H 'Content-Type: application/json' \
    -d '{"signer":"%s","to":"%s","value":"1000000000000000","gasLimit":21000,"requestId":"hello-1"}'
  curl -s http://%s/api/v1/tx/<txId from the answer>
  curl -s 'http://%s/api/v1/tx/by-request?signer=%s&requestId=hello-1'`,
			b.httpAddr, from.Hex(), to.Hex(), b.httpAddr, b.httpAddr, from.Hex())
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
