package signer

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	neturl "net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ExternalSource signs through a clef-compatible signer over JSON-RPC
// (account_signTransaction). Every reply is checked: the signer, or a rule or operator in
// front of it, may alter a request, and the service must broadcast only what it allocated.
type ExternalSource struct {
	client *rpc.Client
	// transport is ours, not http.DefaultTransport, so the cleanup can drop its idle
	// connections: rpc.Client.Close does nothing for HTTP endpoints.
	transport *http.Transport
	closed    atomic.Bool
	addrs     []common.Address // sorted
	// timeout bounds one signing request: a signer that accepts and never answers fails
	// that signer's pass instead of holding it.
	timeout time.Duration
}

// DefaultExternalTimeout bounds a signing request when no timeout is configured.
const DefaultExternalTimeout = 10 * time.Second

// NewExternalSource connects to url for addrs. When the endpoint answers account_list,
// every address in addrs must be listed; an endpoint that rejects the listing (clef
// without a rule approving it, or a signer without the method) is trusted with the
// configured list, and signing for an address it lacks fails later. A transport failure
// (unreachable, timeout, HTTP error) fails construction. ctx bounds the check; the cleanup
// closes the connection. timeout bounds each signing request (0: DefaultExternalTimeout).
func NewExternalSource(ctx context.Context, url string, addrs []common.Address, timeout time.Duration) (*ExternalSource, func(), error) {
	if url == "" {
		return nil, nil, errors.New("external signer: url is empty")
	}
	if len(addrs) == 0 {
		return nil, nil, errors.New("external signer: no addresses configured")
	}
	if _, err := neturl.Parse(url); err != nil {
		// Go's message quotes the address, and a password with a '/' or a second '@' in it
		// is not told apart from the rest well enough to be cut out.
		return nil, nil, errors.New("external signer: url is not a valid URL")
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	client, err := rpc.DialOptions(ctx, url, rpc.WithHTTPClient(&http.Client{Transport: transport}))
	if err != nil {
		return nil, nil, fmt.Errorf("external signer: dial: %w", domain.WithoutURLs(err))
	}
	sorted := slices.Clone(addrs)
	slices.SortFunc(sorted, common.Address.Cmp)
	if timeout <= 0 {
		timeout = DefaultExternalTimeout
	}
	s := &ExternalSource{client: client, transport: transport, addrs: slices.Compact(sorted), timeout: timeout}
	if err := checkListed(ctx, client, addrs); err != nil {
		s.close()
		return nil, nil, fmt.Errorf("external signer: %w", domain.WithoutURLs(err))
	}
	return s, s.close, nil
}

// close makes further signing fail and releases the connection.
func (s *ExternalSource) close() {
	s.closed.Store(true)
	s.client.Close()
	s.transport.CloseIdleConnections()
}

// checkListed cross-checks addrs with account_list when the signer answers it.
func checkListed(ctx context.Context, client *rpc.Client, addrs []common.Address) error {
	var listed []common.Address
	err := client.CallContext(ctx, &listed, "account_list")
	var replied rpc.Error
	switch {
	case errors.As(err, &replied):
		return nil // reachable, but listing is unsupported or denied
	case err != nil:
		return fmt.Errorf("account_list: %w", err)
	}
	for _, addr := range addrs {
		if !slices.Contains(listed, addr) {
			return fmt.Errorf("signer %s is not among the external signer's accounts", addr.Hex())
		}
	}
	return nil
}

// Addresses lists the configured signers, sorted.
func (s *ExternalSource) Addresses() []common.Address { return slices.Clone(s.addrs) }

// MaxInFlight is 4: clef approves requests one after another and decrypts the key for each,
// which runs on a few cores at most, so more requests in flight only queue at clef, each
// waiting out the others inside its own deadline. On this project's 2-core machine 4 in
// flight sign 30 a second with p99 206 ms, against 33 a second and p99 1.6 s with 32, and
// 16 a second one at a time (make bench, BenchmarkSigning/clef).
func (s *ExternalSource) MaxInFlight() int { return 4 }

// signTransactionReply is clef's answer to account_signTransaction. Only raw is used:
// it is exactly what would be broadcast, while tx is a JSON rendering of it.
type signTransactionReply struct {
	Raw hexutil.Bytes `json:"raw"`
}

// SignTx asks the external signer to sign tx for chainID and accepts the answer only if
// it is tx itself, signed by from. The call ends at ctx's deadline or the source's
// timeout, whichever comes first.
func (s *ExternalSource) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	if _, held := slices.BinarySearchFunc(s.addrs, from, common.Address.Cmp); !held {
		return nil, fmt.Errorf("sign for %s: %w", from.Hex(), domain.ErrUnknownSigner)
	}
	if s.closed.Load() {
		return nil, errSourceClosed
	}
	args, err := sendTxArgs(from, tx, chainID)
	if err != nil {
		return nil, fmt.Errorf("external signer: sign for %s: %w", from.Hex(), err)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	var reply signTransactionReply
	if err := s.client.CallContext(ctx, &reply, "account_signTransaction", args); err != nil {
		return nil, fmt.Errorf("external signer: account_signTransaction for %s: %w", from.Hex(), domain.WithoutURLs(err))
	}
	signed, err := checkSignedTx(reply.Raw, tx, from, chainID)
	if err != nil {
		return nil, fmt.Errorf("external signer: sign for %s: %w", from.Hex(), err)
	}
	return signed, nil
}
