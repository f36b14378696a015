package integration

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A batch larger than what its signer can pay for is admitted up to that and no further:
// the rest is refused INSUFFICIENT_FUNDS without a nonce. The funds check reloads its view
// of the signer when a create finds too little left; before, that reload forgot the
// batch's creates still on their way to the writer, and admitted creates past the balance,
// which then waited in INSUFFICIENT_FUNDS holding up the signer's later nonces.
func TestABatchLargerThanTheBalanceIsAdmittedUpToIt(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	key := newKey(t)
	const cacheFor = 2 * time.Second
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(key)))
		bc.Create.CheckFunds = true
		bc.Create.FundsCacheFor = conf.Duration(cacheFor)
	}})
	signer := crypto.PubkeyToAddress(key.PublicKey).Hex()
	const payable = 40
	value, maxFee := big.NewInt(params.GWei*1000), big.NewInt(2*params.GWei)
	each := new(big.Int).Add(value, new(big.Int).Mul(big.NewInt(21000), maxFee))
	fund(t, sim, sim.DevKeys()[1], crypto.PubkeyToAddress(key.PublicKey), new(big.Int).Mul(each, big.NewInt(payable)))
	transfer := func(requestID string, value *big.Int) map[string]any {
		return map[string]any{"signer": signer, "to": devAddress(t, 5), "value": value.String(), "gasLimit": 21000,
			"maxFeePerGas": maxFee.String(), "maxPriorityFeePerGas": "1", "requestId": requestID}
	}
	// A refusal reads the signer's balance; by the batch that view is older than a quarter
	// of fundsCacheFor, so the first create that finds too little left reads it again.
	if warm := s.create(t, transfer("warm", big.NewInt(params.Ether))); warm.reason() != "INSUFFICIENT_FUNDS" {
		t.Fatalf("a create above the balance: %d %s", warm.status, warm.raw)
	}
	time.Sleep(cacheFor/4 + 200*time.Millisecond)

	var creates []map[string]any
	for i := range 3 * payable {
		creates = append(creates, transfer(fmt.Sprintf("payout-%03d", i), value))
	}
	a := s.batch(t, creates)
	if a.body.Created != payable || a.body.Refused != 2*payable {
		reasons := map[string]int{}
		for _, r := range a.body.Results {
			if r.Error != nil {
				reasons[r.Error.Reason+": "+r.Error.Message]++
			}
		}
		t.Fatalf("a batch of %d on a balance for %d: %d created, %d refused (%v)", len(creates), payable, a.body.Created, a.body.Refused, reasons)
	}
	for i, r := range a.body.Results {
		if r.Error != nil && r.Error.Reason != "INSUFFICIENT_FUNDS" {
			t.Fatalf("create %d refused %s, want INSUFFICIENT_FUNDS: %s", i, r.Error.Reason, r.Error.Message)
		}
	}
	if next := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); next != payable {
		t.Fatalf("the signer's next nonce is %d, want %d: a refused create took one", next, payable)
	}
}
