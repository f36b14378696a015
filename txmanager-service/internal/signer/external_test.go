package signer_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/ethereum/go-ethereum/signer/core/apitypes"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/test/clef"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// startClef runs a real clef (`make test-binaries` built it) holding keys for testChainID,
// whose rules approve signing for every key except refused; it stops when t ends.
func startClef(t *testing.T, keys []*ecdsa.PrivateKey, refused ...common.Address) *clef.Clef {
	t.Helper()
	bin, err := clef.FindInRepo()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := clef.Start(ctx, clef.Options{Bin: bin, ChainID: testChainID, Keys: keys, Refused: refused})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop clef: %v", err)
		}
	})
	return c
}

// fakeClef answers account_signTransaction the way clef does: it rebuilds the
// transaction from SendTxArgs, refuses a foreign chain id or account, signs with its
// configured chain id and returns {raw, tx}. misbehave makes it alter the request first.
type fakeClef struct {
	key       *ecdsa.PrivateKey
	chainID   *big.Int
	misbehave func(args *apitypes.SendTxArgs, key **ecdsa.PrivateKey)
}

type fakeClefReply struct {
	Raw hexutil.Bytes      `json:"raw"`
	Tx  *types.Transaction `json:"tx"`
}

func (c *fakeClef) SignTransaction(_ context.Context, args apitypes.SendTxArgs, _ *string) (*fakeClefReply, error) {
	if args.ChainID != nil && args.ChainID.ToInt().Cmp(c.chainID) != 0 {
		return nil, fmt.Errorf("requested chainid %d does not match the configuration of the signer", args.ChainID.ToInt())
	}
	if args.From.Address() != addressOf(c.key) {
		return nil, errors.New("unknown account")
	}
	key := c.key
	if c.misbehave != nil {
		c.misbehave(&args, &key)
	}
	unsigned, err := args.ToTransaction()
	if err != nil {
		return nil, err
	}
	signed, err := types.SignTx(unsigned, types.LatestSignerForChainID(c.chainID), key)
	if err != nil {
		return nil, err
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return nil, err
	}
	return &fakeClefReply{Raw: raw, Tx: signed}, nil
}

// fakeClefLister adds account_list, which real clef answers after approval.
type fakeClefLister struct {
	*fakeClef
	accounts []common.Address
}

func (c fakeClefLister) List(context.Context) ([]common.Address, error) { return c.accounts, nil }

// serveRPC serves service as the "account" namespace on a loopback HTTP server.
func serveRPC(t *testing.T, service any) string {
	t.Helper()
	server := rpc.NewServer()
	if err := server.RegisterName("account", service); err != nil {
		t.Fatal(err)
	}
	httpServer := httptest.NewServer(server)
	t.Cleanup(func() {
		httpServer.Close()
		server.Stop()
	})
	return httpServer.URL
}

func newExternal(t *testing.T, url string, addrs ...common.Address) *signer.ExternalSource {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	src, cleanup, err := signer.NewExternalSource(ctx, url, addrs, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return src
}

// abiCallTx is a contract call whose calldata has the shape clef checks for (a 4-byte
// selector and 32-byte words): clef without --advanced refuses any other calldata.
func abiCallTx(nonce uint64) *types.Transaction {
	to := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	data := append([]byte{0xa9, 0x05, 0x9c, 0xbb}, make([]byte, 64)...) // transfer(address,uint256)
	return types.NewTx(&types.DynamicFeeTx{Nonce: nonce, To: &to, Gas: 60_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2), Data: data})
}

// Real clef, run headless with a rules file approving the account, signs every kind of
// transaction the service asks for, from many goroutines at once.
func TestExternalSourceSigns(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	url := startClef(t, []*ecdsa.PrivateKey{key}).URL()
	src := newExternal(t, url, addressOf(key))
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	tests := []struct {
		name string
		tx   *types.Transaction
	}{
		{"dynamic fee, chain id left to the signer", abiCallTx(9)},
		{"dynamic fee with chain id and access list", types.NewTx(&types.DynamicFeeTx{
			ChainID: testChainID, Nonce: 1, To: &to, Gas: 60_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2),
			AccessList: types.AccessList{{Address: to, StorageKeys: []common.Hash{{1}}}},
		})},
		{"contract creation", types.NewTx(&types.DynamicFeeTx{Nonce: 2, Gas: 100_000, GasTipCap: big.NewInt(1), GasFeeCap: big.NewInt(2), Data: make([]byte, 64)})},
		{"legacy", types.NewTx(&types.LegacyTx{Nonce: 3, To: &to, Gas: 21_000, GasPrice: big.NewInt(5), Value: big.NewInt(1)})},
		{"access list type with empty list", types.NewTx(&types.AccessListTx{Nonce: 4, To: &to, Gas: 21_000, GasPrice: big.NewInt(5)})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			signed, err := src.SignTx(context.Background(), addressOf(key), tt.tx, testChainID)
			if err != nil {
				t.Fatal(err)
			}
			if signed.Type() != tt.tx.Type() {
				t.Fatalf("type %d, want %d", signed.Type(), tt.tx.Type())
			}
			requireSignedBy(t, signed, tt.tx, addressOf(key))
		})
	}
}

func TestExternalSourceRejectsAlteredReplies(t *testing.T) {
	t.Parallel()
	key, otherKey := newKey(t), newKey(t)
	tests := []struct {
		name        string
		misbehave   func(args *apitypes.SendTxArgs, key **ecdsa.PrivateKey)
		wantInError string
	}{
		{"different nonce", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) { a.Nonce++ }, "nonce, signing hash changed"},
		{"signed by another key", func(_ *apitypes.SendTxArgs, k **ecdsa.PrivateKey) { *k = otherKey }, "signed by " + addressOf(otherKey).Hex() + ", not " + addressOf(key).Hex()},
		{"different recipient", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) {
			to := common.NewMixedcaseAddress(addressOf(otherKey))
			a.To = &to
		}, ": to, signing hash changed"},
		{"different value", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) { a.Value = hexutil.Big(*big.NewInt(10)) }, ": value, signing hash changed"},
		{"different data", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) { a.Input = &hexutil.Bytes{0xde, 0xad} }, ": data, signing hash changed"},
		{"different gas", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) { a.Gas++ }, ": gas, signing hash changed"},
		{"higher fee cap", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) { a.MaxFeePerGas = (*hexutil.Big)(big.NewInt(1e18)) }, ": gas fee cap, signing hash changed"},
		{"higher tip", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) {
			a.MaxPriorityFeePerGas = (*hexutil.Big)(big.NewInt(1e10))
		}, ": gas tip cap, signing hash changed"},
		{"legacy instead of dynamic fee", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) {
			a.GasPrice, a.MaxFeePerGas, a.MaxPriorityFeePerGas, a.AccessList = a.MaxFeePerGas, nil, nil, nil
		}, ": type, gas tip cap, signing hash changed"},
		{"added access list", func(a *apitypes.SendTxArgs, _ **ecdsa.PrivateKey) {
			a.AccessList = &types.AccessList{{Address: addressOf(otherKey)}}
		}, ": access list, signing hash changed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := serveRPC(t, &fakeClef{key: key, chainID: testChainID, misbehave: tt.misbehave})
			src := newExternal(t, url, addressOf(key))
			signed, err := src.SignTx(context.Background(), addressOf(key), dynamicFeeTx(5), testChainID)
			if !errors.Is(err, signer.ErrSignedTxMismatch) {
				t.Fatalf("got (%v, %v), want ErrSignedTxMismatch", signed, err)
			}
			if !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("error %q does not mention %q", err, tt.wantInError)
			}
		})
	}
}

func TestExternalSourceRejectsWrongChain(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	// A signer configured for another chain signs with its own chain id; without the
	// check the transaction would be valid on the wrong network.
	url := serveRPC(t, chainIgnoringClef{&fakeClef{key: key, chainID: big.NewInt(1)}})
	src := newExternal(t, url, addressOf(key))
	_, err := src.SignTx(context.Background(), addressOf(key), dynamicFeeTx(0), testChainID)
	if !errors.Is(err, signer.ErrSignedTxMismatch) || !strings.Contains(err.Error(), ": chain id changed") {
		t.Fatalf("got %v, want a chain id mismatch", err)
	}
}

// chainIgnoringClef signs for its own chain whatever chain id it is asked for.
type chainIgnoringClef struct{ *fakeClef }

func (c chainIgnoringClef) SignTransaction(ctx context.Context, args apitypes.SendTxArgs, sel *string) (*fakeClefReply, error) {
	args.ChainID = (*hexutil.Big)(c.chainID)
	return c.fakeClef.SignTransaction(ctx, args, sel)
}

func TestExternalSourceConstructionAndCallErrors(t *testing.T) {
	t.Parallel()
	key, refusedKey := newKey(t), newKey(t)
	real := startClef(t, []*ecdsa.PrivateKey{key, refusedKey}, addressOf(refusedKey))
	missing := addressOf(newKey(t))
	tests := []struct {
		name        string
		url         string
		addrs       []common.Address
		wantInError string
	}{
		{"unreachable", unreachableURL(t), []common.Address{addressOf(key)}, "connection refused"},
		{"key missing from clef", real.URL(), []common.Address{addressOf(key), missing}, "signer " + missing.Hex() + " is not among the external signer's accounts"},
		{"no url", "", []common.Address{addressOf(key)}, "url is empty"},
		{"no addresses", real.URL(), nil, "no addresses"},
		{"bad scheme", "ftp://127.0.0.1:1", []common.Address{addressOf(key)}, "dial"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, cleanup, err := signer.NewExternalSource(ctx, tt.url, tt.addrs, 0)
			if err == nil {
				cleanup()
				t.Fatal("constructed a source")
			}
			if !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("error %q does not contain %q", err, tt.wantInError)
			}
		})
	}

	t.Run("signing for an unknown address", func(t *testing.T) {
		t.Parallel()
		src := newExternal(t, real.URL(), addressOf(key))
		_, err := src.SignTx(context.Background(), addressOf(newKey(t)), dynamicFeeTx(0), testChainID)
		if !errors.Is(err, domain.ErrUnknownSigner) {
			t.Fatalf("got %v, want ErrUnknownSigner", err)
		}
	})
	t.Run("clef's rules refuse the account", func(t *testing.T) {
		t.Parallel()
		src := newExternal(t, real.URL(), addressOf(refusedKey))
		_, err := src.SignTx(context.Background(), addressOf(refusedKey), abiCallTx(0), testChainID)
		if err == nil || !strings.Contains(err.Error(), "account_signTransaction for "+addressOf(refusedKey).Hex()+": request denied") {
			t.Fatalf("got %v, want clef's refusal naming the signer", err)
		}
	})
	t.Run("calldata clef does not take for ABI", func(t *testing.T) {
		t.Parallel()
		src := newExternal(t, real.URL(), addressOf(key))
		_, err := src.SignTx(context.Background(), addressOf(key), dynamicFeeTx(0), testChainID) // 2 bytes of data
		if err == nil || !strings.Contains(err.Error(), "account_signTransaction for "+addressOf(key).Hex()) || !strings.Contains(err.Error(), "not valid ABI") {
			t.Fatalf("got %v, want clef's validation error naming the signer", err)
		}
	})
	t.Run("signer stops answering", func(t *testing.T) {
		t.Parallel()
		proxy := hungProxy(t, real.URL())
		src := newExternal(t, proxy.URL(), addressOf(key))
		if err := proxy.SetMode(faultproxy.Hang); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := src.SignTx(ctx, addressOf(key), dynamicFeeTx(0), testChainID)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("got %v, want the context deadline", err)
		}
	})
	t.Run("unsupported type", func(t *testing.T) {
		t.Parallel()
		src := newExternal(t, real.URL(), addressOf(key))
		tx := types.NewTx(&types.SetCodeTx{Nonce: 1})
		if _, err := src.SignTx(context.Background(), addressOf(key), tx, testChainID); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Fatalf("got %v, want an unsupported-type error", err)
		}
	})
}

// hungProxy is a fault proxy in front of url (a clef), passing requests until told to hang.
func hungProxy(t *testing.T, url string) *faultproxy.Proxy {
	t.Helper()
	proxy, err := faultproxy.Start(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	return proxy
}

// unreachableURL is a loopback address where connections are refused.
func unreachableURL(t *testing.T) string {
	t.Helper()
	return "http://" + testsupport.RefusingAddr(t)
}

// A signer that accepts a request and never answers costs one timeout, not the caller's
// whole context (a pipeline pass has none shorter than the process): real clef, behind a
// proxy that stops passing requests on.
func TestExternalSourceTimesOutAHangingSigner(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	proxy := hungProxy(t, startClef(t, []*ecdsa.PrivateKey{key}).URL())
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	src, cleanup, err := signer.NewExternalSource(ctx, proxy.URL(), []common.Address{addressOf(key)}, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	// Through the proxy clef signs (with the default timeout: a first signature decrypts
	// the key, which under the race detector can take longer than 300ms).
	if _, err := newExternal(t, proxy.URL(), addressOf(key)).SignTx(ctx, addressOf(key), abiCallTx(1), testChainID); err != nil {
		t.Fatalf("signing before the hang: %v", err)
	}
	if err := proxy.SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	_, err = src.SignTx(context.Background(), addressOf(key), abiCallTx(2), testChainID)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("SignTx against a hanging signer: %v, want a deadline error", err)
	}
	if waited := time.Since(started); waited > 4*time.Second {
		t.Fatalf("SignTx returned after %s; the timeout is 300ms", waited)
	}
}

// An external signer's address may carry credentials, an API key in its path or a token in
// its query; its client quotes the address in transport errors, which reach logs, API
// answers and the signer's recorded condition. Real clef, behind a proxy that starts
// refusing connections.
func TestExternalSourceErrorsDoNotTellItsAddress(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	real := startClef(t, []*ecdsa.PrivateKey{key})
	proxy := hungProxy(t, real.URL())
	secrets := []string{"ops", "hunter2", "SIGNERAPIKEY", "TOK", "S3cr", "pw1a", "pw2b"}
	withSecrets := func(base string) string {
		return strings.Replace(base, "http://", "http://ops:hunter2@", 1) + "/v1/SIGNERAPIKEY?token=TOK"
	}
	src := newExternal(t, withSecrets(proxy.URL()), addressOf(key))
	if err := proxy.SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	_, signErr := src.SignTx(context.Background(), addressOf(key), abiCallTx(0), testChainID)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, unreachableErr := signer.NewExternalSource(ctx, withSecrets(unreachableURL(t)), []common.Address{addressOf(key)}, 0)
	errs := map[string]error{"signing": signErr, "construction, unreachable": unreachableErr}
	// Passwords Go's parser refuses: one with a character it does not take, one with a '/'
	// (base64 has them) that ends the address's authority early, one with a second '@'.
	for i, raw := range []string{"http://admin:S3cr^t@127.0.0.1:1/", "http://ops:pw1a/def=@127.0.0.1:1/", "http://ops:p@pw2b^w@127.0.0.1:1/"} {
		_, _, errs[fmt.Sprintf("construction, unparsable password %d", i+1)] = signer.NewExternalSource(ctx, raw, []common.Address{addressOf(key)}, 0)
	}
	for name, err := range errs {
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		for _, s := range secrets {
			if strings.Contains(err.Error(), s) {
				t.Errorf("%s: error %q tells %q", name, err, s)
			}
		}
		if !strings.Contains(name, "unparsable") && !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s: error %q lost the host, which locates the fault", name, err)
		}
	}
}
