package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/test/clef"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// externalSigner is a real clef (test/clef: built from go-ethereum, run headless with an
// attested rules file approving its one account) behind a fault proxy, so the scenario
// can make it stop answering: Hang holds every request unanswered, as a remote signer or
// an HSM that stopped responding would.
type externalSigner struct {
	clef   *clef.Clef
	proxy  *faultproxy.Proxy
	addr   common.Address
	hungAt uint64 // the proxy's request count when the hang began
}

// startExternalSigner builds clef into binDir (once) and starts it in dir holding key.
func startExternalSigner(ctx context.Context, binDir, dir string, key *ecdsa.PrivateKey, chainID *big.Int) (*externalSigner, error) {
	bin, err := clef.Build(ctx, binDir)
	if err != nil {
		return nil, err
	}
	c, err := clef.Start(ctx, clef.Options{Bin: bin, Dir: dir, ChainID: chainID, Keys: []*ecdsa.PrivateKey{key}})
	if err != nil {
		return nil, err
	}
	proxy, err := faultproxy.Start(c.URL())
	if err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("external signer: %w", err)
	}
	return &externalSigner{clef: c, proxy: proxy, addr: crypto.PubkeyToAddress(key.PublicKey)}, nil
}

// URL is where the service reaches the signer: the proxy in front of clef.
func (s *externalSigner) URL() string { return s.proxy.URL() }

func (s *externalSigner) Address() common.Address { return s.addr }

// Hang stops passing requests on to clef until Release.
func (s *externalSigner) Hang() error {
	s.hungAt = s.proxy.Requests()
	return s.proxy.SetMode(faultproxy.Hang)
}

// Release passes requests again and reports how many arrived (and were held) meanwhile.
func (s *externalSigner) Release() (held uint64, err error) {
	held = s.proxy.Requests() - s.hungAt
	return held, s.proxy.SetMode(faultproxy.Pass)
}

// Close stops the proxy, then clef.
func (s *externalSigner) Close() error {
	s.proxy.Close()
	return s.clef.Stop()
}
