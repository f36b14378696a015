package app

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

// Banner tells a developer where the service listens, how to try it and what to expect.
type Banner struct {
	version                         services.BuildVersion
	httpAddr, grpcAddr, node, chain string
	example                         string
	console                         bool
}

// exampleRequestID is the banner's create: the wait command finds it by this id, so both
// can be pasted as they are (and pasting the create again is a replay, not a second one).
const exampleRequestID = "hello-1"

// NewBanner prepares the start-up message.
func NewBanner(bc *conf.Bootstrap, registry *signer.Registry, stacks ChainStacks, version services.BuildVersion) *Banner {
	descriptions := make([]string, len(stacks))
	for i, stack := range stacks {
		descriptions[i] = stack.Connection.Description
	}
	b := &Banner{version: version, httpAddr: bc.Server.HTTP.Addr, grpcAddr: bc.Server.GRPC.Addr, node: bc.Node.ID, chain: strings.Join(descriptions, "\n        "),
		console: bc.Console.Enabled}
	if addrs := registry.Addresses(); len(addrs) > 0 {
		from, to := addrs[0].Hex(), addrs[len(addrs)-1].Hex()
		// With several chains a create names its chain.
		chainField, chainQuery, chainFlag := "", "", ""
		if len(stacks) > 1 {
			id := stacks[0].Services.ID
			chainField, chainQuery, chainFlag = fmt.Sprintf(`"chainId":%d,`, id), fmt.Sprintf("&chainId=%d", id), fmt.Sprintf(" --chain %d", id)
		}
		b.example = fmt.Sprintf(`curl -s -X POST http://%s/api/v1/tx -H 'Content-Type: application/json' \
    -d '{%s"signer":"%s","to":"%s","value":"1000000000000000","gasLimit":21000,"requestId":"%s"}'
then wait for it: %s
  curl -s 'http://%s/api/v1/tx/by-request?signer=%s&requestId=%s%s&wait=20s'
or with txmctl (make run builds it into bin/):
  bin/txmctl --addr %s%s tx wait --signer %s --request-id %s`,
			b.httpAddr, chainField, from, to, exampleRequestID,
			expectation(bc.ChainViews()[0]),
			b.httpAddr, from, exampleRequestID, chainQuery,
			b.grpcAddr, chainFlag, from, exampleRequestID)
	}
	return b
}

// expectation says when a create becomes CONFIRMED: on the embedded chain, whose block
// interval is known, in seconds; on a real chain in confirmations.
func expectation(view *conf.Bootstrap) string {
	c := view.Confirmations
	switch {
	case c.UseFinalizedTag:
		return "CONFIRMED once the node's finalized block covers it"
	case len(view.Chain.Endpoints()) == 0:
		// Mined in the next block, final when required-1 more follow; one more interval
		// covers the pipeline's own pace.
		interval := view.Chain.Embedded.BlockInterval.Std()
		about := time.Duration(c.Required+1) * interval
		return fmt.Sprintf("CONFIRMED in about %s (%d confirmations, a block every %s)", about, c.Required, interval)
	default:
		return fmt.Sprintf("CONFIRMED after %d confirmations", c.Required)
	}
}

// Print writes the banner.
func (b *Banner) Print(w io.Writer) {
	fmt.Fprintf(w, "\ntxmanager-service %s is up (node %s)\n  HTTP  http://%s\n  gRPC  %s\n  chain %s\n",
		b.version, b.node, b.httpAddr, b.grpcAddr, b.chain)
	if b.console {
		fmt.Fprintf(w, "  console http://%s/console (the operator console in a browser)\n", b.httpAddr)
	}
	if b.example != "" {
		fmt.Fprintf(w, "try:\n  %s\n", b.example)
	}
	fmt.Fprintln(w, "Ctrl-C stops the service and everything it started.")
}
