package integration

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/test/clef"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/gcpkms"
	"github.com/bionicotaku/txmanager-service/test/localkms"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Remote key sources behind the whole service on a simulated chain: AWS KMS (the local-kms
// emulator, through the real SDK), Google Cloud KMS (test/gcpkms, the real KMS API over
// gRPC with real keys, through the real client) and a real clef. Each is reached through a
// fault front that can hang it.

// remoteSignerTimeout is every remote source's per-call deadline in these tests.
const remoteSignerTimeout = time.Second

var remoteSignerFundingAmount = new(big.Int).Mul(big.NewInt(params.Ether), big.NewInt(1))

// remoteSigners is one account in each remote source, funded on the test chain.
type remoteSigners struct {
	aws      *localkms.Server
	awsFront *localkms.Front
	awsKeyID string
	awsAddr  common.Address

	gcp     *gcpkms.Server
	gcpKey  string
	gcpAddr common.Address

	*clefSigner
}

// clefSigner is a real clef holding one account, behind a fault proxy.
type clefSigner struct {
	clef      *clef.Clef
	clefProxy *faultproxy.Proxy
	clefAddr  common.Address
}

// startClefSigner starts clef (`make test-binaries` built it) holding key for the simulated
// chain, behind a proxy; refuse makes clef's rules reject the account (it still lists it).
func startClefSigner(t testing.TB, key *ecdsa.PrivateKey, refuse bool) *clefSigner {
	t.Helper()
	var opts clef.Options
	if refuse {
		opts.Refused = []common.Address{crypto.PubkeyToAddress(key.PublicKey)}
	}
	return startClefSignerWith(t, key, opts)
}

// startClefSignerWith is startClefSigner with clef's options (its binary, chain and keys
// are filled in).
func startClefSignerWith(t testing.TB, key *ecdsa.PrivateKey, opts clef.Options) *clefSigner {
	t.Helper()
	bin, err := clef.FindInRepo()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := &clefSigner{clefAddr: crypto.PubkeyToAddress(key.PublicKey)}
	opts.Bin, opts.ChainID, opts.Keys = bin, big.NewInt(chain.SimulatedChainID), []*ecdsa.PrivateKey{key}
	if c.clef, err = clef.Start(ctx, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.clef.Stop(); err != nil {
			t.Errorf("stop clef: %v", err)
		}
	})
	if c.clefProxy, err = faultproxy.Start(c.clef.URL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.clefProxy.Close)
	return c
}

// startRemoteSigners starts the three sources and funds their accounts on sim. clefRefuses
// makes clef's rules refuse its account. The AWS SDK's default credential chain reads the
// emulator's credentials from the environment, so a test using this cannot run in
// parallel.
func startRemoteSigners(t *testing.T, sim *chain.SimulatedChain, clefRefuses bool) *remoteSigners {
	t.Helper()
	r := &remoteSigners{clefSigner: startClefSigner(t, newSignerKey(t), clefRefuses), aws: startLocalKMS(t)}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if r.awsFront, err = localkms.StartFront(r.aws.URL()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.awsFront.Close)
	if r.awsKeyID, r.awsAddr, err = r.aws.CreateKey(ctx); err != nil {
		t.Fatal(err)
	}

	if r.gcp, err = gcpkms.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.gcp.Close)
	r.gcpKey = gcpkms.KeyName("txm-hot")
	r.gcpAddr = r.gcp.AddKey(r.gcpKey, newSignerKey(t))

	funder := sim.DevKeys()[7]
	for _, addr := range r.addresses() {
		fund(t, sim, funder, addr, remoteSignerFundingAmount)
	}
	return r
}

// startLocalKMS starts the AWS KMS emulator (`make test-binaries` built it), stopped when
// tb ends; the AWS SDK's default credential chain reads its credentials from the
// environment tb sets.
func startLocalKMS(tb testing.TB) *localkms.Server {
	tb.Helper()
	bin, err := localkms.FindInRepo()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Setenv("AWS_ACCESS_KEY_ID", localkms.AccessKeyID)
	tb.Setenv("AWS_SECRET_ACCESS_KEY", localkms.SecretAccessKey)
	tb.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := localkms.Start(ctx, bin)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(server.Stop)
	return server
}

func newSignerKey(t testing.TB) *ecdsa.PrivateKey {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func (r *remoteSigners) addresses() []common.Address {
	return []common.Address{r.awsAddr, r.gcpAddr, r.clefAddr}
}

// sourceOf names the source holding addr, for messages.
func (r *remoteSigners) sourceOf(addr common.Address) string {
	switch addr {
	case r.awsAddr:
		return "aws kms"
	case r.gcpAddr:
		return "gcp kms"
	default:
		return "clef"
	}
}

// configure points the service at all three sources, through their fronts.
func (r *remoteSigners) configure(bc *conf.Bootstrap) {
	timeout := conf.Duration(remoteSignerTimeout)
	bc.Signers.AWSKMS = conf.AWSKMSSource{Region: localkms.Region, Endpoint: r.awsFront.URL(), Timeout: timeout, MaxAttempts: 2,
		Keys: []conf.KMSKey{{ID: r.awsKeyID, Address: r.awsAddr.Hex()}}}
	bc.Signers.GCPKMS = conf.GCPKMSSource{Endpoint: r.gcp.Addr(), Plaintext: true, Timeout: timeout, MaxAttempts: 2,
		Keys: []conf.KMSKey{{ID: r.gcpKey}}}
	bc.Signers.External = conf.ExternalSource{URL: r.clefProxy.URL(), Addresses: []string{r.clefAddr.Hex()}, Timeout: timeout}
}

// hang makes every source stop answering; release lets them answer again.
func (r *remoteSigners) hang(t *testing.T) {
	t.Helper()
	r.awsFront.Hang()
	r.gcp.Hang()
	if err := r.clefProxy.SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
}

func (r *remoteSigners) release(t *testing.T) {
	t.Helper()
	r.awsFront.Release()
	r.gcp.Release()
	if err := r.clefProxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
}

func transfer(from common.Address, to string, value int) map[string]any {
	return map[string]any{"signer": from.Hex(), "to": to, "value": big.NewInt(int64(value)).String(), "gasLimit": 21000}
}

// requireMinedBy checks that the transaction behind a CONFIRMED row is on the chain and
// was signed by from.
func requireMinedBy(t *testing.T, sim *chain.SimulatedChain, row txRow, from common.Address) {
	t.Helper()
	tx, pending, err := sim.Backend().Client().TransactionByHash(context.Background(), common.HexToHash(row.txHash))
	if err != nil || pending {
		t.Fatalf("transaction %s: pending %v, %v", row.txHash, pending, err)
	}
	sender, err := types.Sender(types.LatestSignerForChainID(big.NewInt(chain.SimulatedChainID)), tx)
	if err != nil || sender != from {
		t.Fatalf("transaction %s was signed by %s (%v), want %s", row.txHash, sender.Hex(), err, from.Hex())
	}
}

// Creates for an AWS KMS, a Google Cloud KMS and a clef signer, beside a raw-key signer,
// all reach CONFIRMED, signed on the chain by the account that was asked for.
func TestRemoteSignersConfirm(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startRemoteSigners(t, sim, false)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: remote.configure})
	to := devAddress(t, 6)
	type created struct {
		id   string
		from common.Address
	}
	var ids []created
	for i := range 3 {
		for _, from := range append(remote.addresses(), common.HexToAddress(devAddress(t, 0))) {
			ids = append(ids, created{s.createOK(t, transfer(from, to, i+1)), from})
		}
	}
	for _, c := range ids {
		waitFor(t, 60*time.Second, "transaction "+c.id+" of "+remote.sourceOf(c.from)+" CONFIRMED", func() bool { return s.tx(t, c.id).state == "CONFIRMED" })
		requireMinedBy(t, sim, s.tx(t, c.id), c.from)
	}
}

// Every remote source stops answering at once: each signing attempt ends at the per-call
// deadline (logged, naming the signer), the raw-key signer's transactions confirm
// meanwhile, and once the sources answer again their transactions confirm too.
func TestHungRemoteSignersCostTheirDeadline(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startRemoteSigners(t, sim, false)
	logs := &testsupport.LogBuffer{}
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, logs: logs, configure: remote.configure})
	to := devAddress(t, 6)
	remote.hang(t)
	hung := map[common.Address]string{}
	for _, from := range remote.addresses() {
		hung[from] = s.createOK(t, transfer(from, to, 1))
	}
	started := time.Now()
	for from := range hung {
		waitFor(t, 10*remoteSignerTimeout, "a deadline logged for "+remote.sourceOf(from)+" signer "+from.Hex(), func() bool {
			return deadlineLogged(logs.String(), from)
		})
	}
	t.Logf("every hung source's deadline logged %s after the creates (deadline %s)", time.Since(started).Round(time.Millisecond), remoteSignerTimeout)
	var healthy []string
	for i := range 3 {
		healthy = append(healthy, s.createOK(t, transfer(common.HexToAddress(devAddress(t, 0)), to, i+2)))
	}
	for _, id := range healthy {
		waitFor(t, 30*time.Second, "the raw-key signer's transaction "+id+" CONFIRMED while the remote sources hang", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	for from, id := range hung {
		if state := s.tx(t, id).state; state != "ALLOCATED" {
			t.Fatalf("%s signer's transaction is %s while its source hangs, want ALLOCATED (never signed)", remote.sourceOf(from), state)
		}
	}
	remote.release(t)
	for from, id := range hung {
		waitFor(t, 60*time.Second, remote.sourceOf(from)+" signer's transaction CONFIRMED after the hang", func() bool { return s.tx(t, id).state == "CONFIRMED" })
		requireMinedBy(t, sim, s.tx(t, id), from)
	}
}

// deadlineLogged: a pipeline failure for signer whose error is the context deadline.
func deadlineLogged(logs string, signer common.Address) bool {
	for line := range strings.Lines(logs) {
		if strings.Contains(line, `"signer":"`+signer.Hex()+`"`) && strings.Contains(line, "context deadline exceeded") {
			return true
		}
	}
	return false
}

// A key the source refuses at signing time (AWS: the key disabled; Google: the
// permission withdrawn; clef: its rules reject the account) leaves the transaction
// ALLOCATED, and the pipeline's log says which signer and why.
func TestRemoteSignerRefusedAtSignTime(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startRemoteSigners(t, sim, true)
	logs := &testsupport.LogBuffer{}
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, logs: logs, configure: remote.configure})
	if err := remote.aws.DisableKey(context.Background(), remote.awsKeyID); err != nil {
		t.Fatal(err)
	}
	remote.gcp.Deny(remote.gcpKey)
	reasons := map[common.Address]string{
		remote.awsAddr:  "aws kms: sign for " + remote.awsAddr.Hex() + " with key " + remote.awsKeyID,
		remote.gcpAddr:  "gcp kms: sign for " + remote.gcpAddr.Hex() + " with key " + remote.gcpKey,
		remote.clefAddr: "external signer: account_signTransaction for " + remote.clefAddr.Hex() + ": request denied",
	}
	details := map[common.Address]string{remote.awsAddr: "DisabledException", remote.gcpAddr: "PermissionDenied", remote.clefAddr: "request denied"}
	ids := map[common.Address]string{}
	for from := range reasons {
		ids[from] = s.createOK(t, transfer(from, devAddress(t, 6), 1))
	}
	for from, reason := range reasons {
		waitFor(t, 20*time.Second, "the refusal of "+remote.sourceOf(from)+" logged", func() bool {
			for line := range strings.Lines(logs.String()) {
				if strings.Contains(line, `"signer":"`+from.Hex()+`"`) && strings.Contains(line, reason) && strings.Contains(line, details[from]) {
					return true
				}
			}
			return false
		})
		if state := s.tx(t, ids[from]).state; state != "ALLOCATED" {
			t.Fatalf("%s signer's transaction is %s, want ALLOCATED (never signed)", remote.sourceOf(from), state)
		}
	}
}

// A key missing from its source, or one the process may not read, stops the service at
// startup with an error naming the key, its configuration entry or the signer.
func TestRemoteSignerMissingAtStartup(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startRemoteSigners(t, sim, false)
	remote.gcp.AddKey(gcpkms.KeyName("not-ours"), newSignerKey(t))
	remote.gcp.Deny(gcpkms.KeyName("not-ours"))
	missing := crypto.PubkeyToAddress(newSignerKey(t).PublicKey)
	tests := []struct {
		name      string
		configure func(bc *conf.Bootstrap)
		want      []string
	}{
		{"AWS KMS key that does not exist", func(bc *conf.Bootstrap) {
			bc.Signers.AWSKMS.Keys = append(bc.Signers.AWSKMS.Keys, conf.KMSKey{ID: "alias/txm-missing"})
		}, []string{"aws kms: key alias/txm-missing (signers.awsKms.keys[1]): get public key", "NotFoundException"}},
		{"Cloud KMS key version that does not exist", func(bc *conf.Bootstrap) {
			bc.Signers.GCPKMS.Keys = []conf.KMSKey{{ID: gcpkms.KeyName("txm-missing")}}
		}, []string{"gcp kms: key " + gcpkms.KeyName("txm-missing") + " (signers.gcpKms.keys[0]): get public key", "NotFound"}},
		{"Cloud KMS key the service may not use", func(bc *conf.Bootstrap) {
			bc.Signers.GCPKMS.Keys = []conf.KMSKey{{ID: gcpkms.KeyName("not-ours")}}
		}, []string{"gcp kms: key " + gcpkms.KeyName("not-ours") + " (signers.gcpKms.keys[0]): get public key", "PermissionDenied"}},
		{"clef account that clef does not hold", func(bc *conf.Bootstrap) {
			bc.Signers.External.Addresses = append(bc.Signers.External.Addresses, missing.Hex())
		}, []string{"external signer: signer " + missing.Hex() + " is not among the external signer's accounts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tryStartService(t, serviceOptions{chain: sim, signers: 1, configure: func(bc *conf.Bootstrap) {
				remote.configure(bc)
				tt.configure(bc)
			}})
			if err == nil {
				t.Fatal("the service started")
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Fatalf("startup error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// A remote key refuses one signature in the middle of a signer's run (clef's rules reject
// nonce 3 for a while): the transactions below it are signed, sent and confirmed while it
// is refused, none above it is signed before it (a nonce above a gap is no use to the
// node), and once the key signs again every transaction confirms, each nonce once.
func TestASignatureRefusedMidRunHoldsBackOnlyWhatFollows(t *testing.T) {
	const refused, total = 3, 10
	sim := newTestChain(t, 250*time.Millisecond)
	refusedUntil := time.Now().Add(20 * time.Second)
	c := startClefSignerWith(t, newSignerKey(t), clef.Options{RefusedNonce: refused, RefusedUntil: refusedUntil})
	fund(t, sim, sim.DevKeys()[7], c.clefAddr, remoteSignerFundingAmount)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.External = conf.ExternalSource{URL: c.clefProxy.URL(), Addresses: []string{c.clefAddr.Hex()}, Timeout: conf.Duration(remoteSignerTimeout)}
	}})
	to := devAddress(t, 6)
	ids := make([]string, total) // ids[n] has nonce n: one signer's creates, one after another
	for n := range ids {
		ids[n] = s.createOK(t, transfer(c.clefAddr, to, n+1))
	}
	for n := range refused {
		waitFor(t, 15*time.Second, fmt.Sprintf("nonce %d CONFIRMED while nonce %d is refused", n, refused), func() bool {
			return s.tx(t, ids[n]).state == string(domain.StateConfirmed)
		})
	}
	held := 0
	for n := refused; n < total; n++ {
		if row := s.tx(t, ids[n]); row.state == string(domain.StateAllocated) && row.txHash == "" {
			held++
		}
	}
	if time.Now().After(refusedUntil) {
		t.Fatalf("the nonces below the refused one took longer than clef refused it (until %s): the machine is too slow for this test's window", refusedUntil.Format(time.TimeOnly))
	}
	if held != total-refused {
		t.Fatalf("%d of the %d transactions from nonce %d up are unsigned while it is refused, want all", held, total-refused, refused)
	}
	for n, id := range ids {
		waitFor(t, 60*time.Second, fmt.Sprintf("nonce %d CONFIRMED once clef signs again", n), func() bool {
			return s.tx(t, id).state == string(domain.StateConfirmed)
		})
		row := s.tx(t, id)
		requireMinedBy(t, sim, row, c.clefAddr)
		tx, _, err := sim.Backend().Client().TransactionByHash(context.Background(), common.HexToHash(row.txHash))
		if err != nil {
			t.Fatalf("transaction %s: %v", id, err)
		}
		if tx.Nonce() != uint64(n) {
			t.Fatalf("transaction %s on chain has nonce %d, want %d", id, tx.Nonce(), n)
		}
	}
}

// A key source that refuses one transaction for good (clef's rules cap the value it signs)
// holds back every nonce after it; an operator resolves it through the admin API with
// CANCEL: a 0-value self-transfer the rules allow takes its nonce, it ends FAILED_FINAL
// (CANCELLED) with its completion, and the transactions after it confirm. A never-signed
// transaction takes no action that leaves its nonce empty.
func TestAnOperatorCancelsATransactionTheKeyRefuses(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	c := startClefSignerWith(t, newSignerKey(t), clef.Options{MaxValue: big.NewInt(1000)})
	fund(t, sim, sim.DevKeys()[7], c.clefAddr, remoteSignerFundingAmount)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.External = conf.ExternalSource{URL: c.clefProxy.URL(), Addresses: []string{c.clefAddr.Hex()}, Timeout: conf.Duration(remoteSignerTimeout)}
	}})
	to := devAddress(t, 6)
	refused := s.createOK(t, transfer(c.clefAddr, to, 5000)) // nonce 0, above clef's limit
	after := s.createOK(t, transfer(c.clefAddr, to, 10))     // nonce 1
	time.Sleep(3 * time.Second)
	for _, id := range []string{refused, after} {
		if row := s.tx(t, id); row.state != string(domain.StateAllocated) || row.txHash != "" {
			t.Fatalf("transaction %s while clef refuses nonce 0: %+v, want ALLOCATED and unsigned", id, row)
		}
	}

	resolve := func(action string) apiResponse {
		return s.do(t, http.MethodPost, "/api/v1/admin/tx/"+refused+"/resolve", []byte(`{"action":"`+action+`","reason":"clef refuses its value"}`))
	}
	if r := resolve("NOOP"); r.status != http.StatusBadRequest || r.body["reason"] != "INVALID_ARGUMENT" {
		t.Fatalf("NOOP on a never-signed transaction: %d %s, want 400 INVALID_ARGUMENT", r.status, r.raw)
	}
	if r := resolve("CANCEL"); r.status != http.StatusOK {
		t.Fatalf("CANCEL: %d %s", r.status, r.raw)
	}
	waitFor(t, 60*time.Second, "the refused transaction cancelled and the next one confirmed", func() bool {
		return s.tx(t, refused).state == string(domain.StateFailedFinal) && s.tx(t, after).state == string(domain.StateConfirmed)
	})
	if row := s.tx(t, refused); row.subState != string(domain.SubStateCancelled) {
		t.Fatalf("the refused transaction ended %+v, want FAILED_FINAL/CANCELLED", row)
	}
	if n := s.count(t, "SELECT count(*) FROM tx_completions WHERE tx_id = '"+refused+"'"); n != 1 {
		t.Fatalf("%d completions for the cancelled transaction, want 1", n)
	}
}

// After an operator cancelled the one transaction its key source refused, a signer held
// back for that failure takes creates again: the cancellation's signature shows the key
// signs. Before, with nothing else left for the submitter to sign, nothing cleared the
// failure, and every create was answered 503 SIGNER_UNAVAILABLE while clients kept the
// lease alive by retrying.
func TestASignerHeldBackTakesCreatesAgainOnceItsRefusedTransactionIsCancelled(t *testing.T) {
	sim := newTestChain(t, 250*time.Millisecond)
	c := startClefSignerWith(t, newSignerKey(t), clef.Options{MaxValue: big.NewInt(1000)})
	fund(t, sim, sim.DevKeys()[7], c.clefAddr, remoteSignerFundingAmount)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.External = conf.ExternalSource{URL: c.clefProxy.URL(), Addresses: []string{c.clefAddr.Hex()}, Timeout: conf.Duration(remoteSignerTimeout)}
		bc.Pipeline.SigningStall = conf.SigningStall{MaxUnsigned: 500, MaxDuration: conf.Duration(2 * time.Second)}
	}})
	to := devAddress(t, 6)
	refused := s.createOK(t, transfer(c.clefAddr, to, 5000)) // above clef's limit: refused for good
	waitFor(t, 30*time.Second, "the key source's refusal recorded", func() bool {
		return s.count(t, "SELECT count(*) FROM signer_signing WHERE failing_since IS NOT NULL") == 1
	})
	time.Sleep(2500 * time.Millisecond) // past the bound, before any other create
	if r := s.create(t, transfer(c.clefAddr, to, 10)); r.status != http.StatusServiceUnavailable || r.reason() != "SIGNER_UNAVAILABLE" {
		t.Fatalf("a create past the bound: %d %s, want 503 SIGNER_UNAVAILABLE", r.status, r.raw)
	}
	if n := s.count(t, "SELECT count(*) FROM managed_tx"); n != 1 {
		t.Fatalf("%d transactions, want the refused one alone: nothing else for the submitter to sign", n)
	}
	if r := s.do(t, http.MethodPost, "/api/v1/admin/tx/"+refused+"/resolve", []byte(`{"action":"CANCEL","reason":"clef refuses its value"}`)); r.status != http.StatusOK {
		t.Fatalf("CANCEL: %d %s", r.status, r.raw)
	}
	waitFor(t, 60*time.Second, "the refused transaction cancelled", func() bool { return s.tx(t, refused).state == string(domain.StateFailedFinal) })
	var accepted string
	waitFor(t, 10*time.Second, "a create accepted again", func() bool {
		r := s.create(t, transfer(c.clefAddr, to, 10))
		if r.status == http.StatusAccepted {
			accepted, _ = r.tx()["txId"].(string)
			return true
		}
		if r.reason() != "SIGNER_UNAVAILABLE" {
			t.Fatalf("a create after the cancellation: %d %s", r.status, r.raw)
		}
		return false
	})
	waitFor(t, 60*time.Second, "the create after the cancellation confirmed", func() bool { return s.tx(t, accepted).state == string(domain.StateConfirmed) })
}
