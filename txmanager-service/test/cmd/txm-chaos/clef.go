package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"
)

// hangingSigner is a clef-compatible external signer (account_list,
// account_signTransaction over HTTP JSON-RPC) on a loopback port of its own, holding one
// key. Hang makes every signing request wait, without an answer, until Release: a remote
// signer or HSM that stopped responding.
type hangingSigner struct {
	key     *ecdsa.PrivateKey
	chainID *big.Int
	url     string
	server  *http.Server
	rpc     *rpc.Server

	mu      sync.Mutex
	hung    chan struct{} // closed by Release; nil while answering
	signed  int
	waiting int
}

func startHangingSigner(key *ecdsa.PrivateKey, chainID *big.Int) (*hangingSigner, error) {
	s := &hangingSigner{key: key, chainID: chainID, rpc: rpc.NewServer()}
	if err := s.rpc.RegisterName("account", &clefAPI{s}); err != nil {
		return nil, err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("external signer: listen: %w", err)
	}
	s.url = "http://" + listener.Addr().String()
	s.server = &http.Server{Handler: s.rpc, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.server.Serve(listener) }()
	return s, nil
}

func (s *hangingSigner) URL() string { return s.url }

func (s *hangingSigner) Address() common.Address { return crypto.PubkeyToAddress(s.key.PublicKey) }

// Hang stops answering signing requests until Release.
func (s *hangingSigner) Hang() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung == nil {
		s.hung = make(chan struct{})
	}
}

// Release answers again, the held requests included (their callers have long given up).
func (s *hangingSigner) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hung != nil {
		close(s.hung)
		s.hung = nil
	}
}

// Counts reports the transactions signed and the requests that were held by a hang.
func (s *hangingSigner) Counts() (signed, held int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.signed, s.waiting
}

func (s *hangingSigner) Close() {
	s.Release()
	_ = s.server.Close()
	s.rpc.Stop()
}

// clefAPI is the "account" namespace as clef serves it.
type clefAPI struct{ s *hangingSigner }

type signedReply struct {
	Raw hexutil.Bytes      `json:"raw"`
	Tx  *types.Transaction `json:"tx"`
}

// List answers account_list.
func (a *clefAPI) List(context.Context) ([]common.Address, error) {
	return []common.Address{a.s.Address()}, nil
}

// SignTransaction answers account_signTransaction: it rebuilds the transaction from the
// arguments, refuses another chain or account, and signs, unless hung.
func (a *clefAPI) SignTransaction(ctx context.Context, args apitypes.SendTxArgs, _ *string) (*signedReply, error) {
	s := a.s
	s.mu.Lock()
	hung := s.hung
	if hung != nil {
		s.waiting++
	}
	s.mu.Unlock()
	if hung != nil {
		select {
		case <-hung:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if args.ChainID != nil && args.ChainID.ToInt().Cmp(s.chainID) != 0 {
		return nil, fmt.Errorf("requested chainid %d does not match the configuration of the signer", args.ChainID.ToInt())
	}
	if args.From.Address() != s.Address() {
		return nil, errors.New("unknown account")
	}
	unsigned, err := args.ToTransaction()
	if err != nil {
		return nil, err
	}
	signed, err := types.SignTx(unsigned, types.LatestSignerForChainID(s.chainID), s.key)
	if err != nil {
		return nil, err
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.signed++
	s.mu.Unlock()
	return &signedReply{Raw: raw, Tx: signed}, nil
}
