package reconcile

import (
	"context"
	"io"
	"math/big"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// What the chain holds at the lost nonces becomes rows whose intent is what the chain ran
// and whose attempt is the chain's signed bytes.
func TestRecoveredRows(t *testing.T) {
	signer := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	to := common.HexToAddress("0x00000000000000000000000000000000000000bb")
	now := time.Unix(5000, 0)
	found := []services.SentTx{
		{Hash: common.Hash{1}, Nonce: 10, To: &to, Value: big.NewInt(7), Data: []byte{1}, Gas: 60000, MaxFee: big.NewInt(9), MaxTip: big.NewInt(2), Raw: []byte("raw10"), BlockNumber: 44},
		{Hash: common.Hash{2}, Nonce: 11, Gas: 90000, Data: []byte{0x60}, Raw: []byte("raw12")}, // a contract creation, no value
	}
	rows := recoveredRows(signer, signer.Hex(), found, now)
	if len(rows) != 2 {
		t.Fatalf("%d rows, want 2", len(rows))
	}
	first := rows[0]
	if first.Tx.Nonce != 10 || *first.Tx.Intent.To != to || first.Tx.Intent.Value.Int64() != 7 || first.Tx.EffectiveGasLimit != 60000 ||
		first.Tx.State != domain.StateTracking || *first.Tx.TxHash != (common.Hash{1}) || first.Tx.RecoveredAt == nil || !first.Tx.RecoveredAt.Equal(now) {
		t.Errorf("row %+v", first.Tx)
	}
	if a := first.Attempt; a.TxID != first.Tx.ID || a.Hash != (common.Hash{1}) || a.Kind != pipeline.AttemptOriginal || string(a.Raw) != "raw10" || a.MaxFee.Int64() != 9 {
		t.Errorf("attempt %+v", a)
	}
	creation := rows[1].Tx
	if creation.Intent.To != nil || creation.Intent.Value.Sign() != 0 || rows[1].Attempt.MaxFee.Sign() != 0 {
		t.Errorf("contract creation row %+v", creation)
	}
	// A retry of the same intent (any gas left to estimation) has the row's recovery key.
	retry := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &to, Value: big.NewInt(7), Data: []byte{1}}}
	if retry.RecoveryKey() != (domain.CreateRequest{Signer: signer, Intent: first.Tx.Intent}).RecoveryKey() {
		t.Error("a retry of the intent does not have the recovered row's key")
	}
}

// A step records the run of unknown nonces from the first unrecorded one and says where
// the next scan starts; it never skips a nonce, never records one twice, and never moves
// past blocks near the head that a reorganisation may still replace.
func TestPlanRecoveryStep(t *testing.T) {
	tx := func(nonce, block uint64) services.SentTx { return services.SentTx{Nonce: nonce, BlockNumber: block} }
	rec := func(from, recordedTo, to uint64) Recovery {
		return Recovery{NonceRange: NonceRange{From: from, To: to}, RecoveryProgress: RecoveryProgress{RecordedTo: recordedTo}}
	}
	tests := []struct {
		name        string
		rec         Recovery
		start       uint64
		scan        services.SentScan
		margin      uint64
		wantNonces  []uint64
		wantTo      uint64
		wantFrom    uint64
		wantHead    bool
		wantTooLate bool
	}{
		{
			name: "a run from the first unrecorded nonce, the next scan from the last one's block",
			rec:  rec(10, 10, 20), start: 100, margin: 12,
			scan:       services.SentScan{Txs: []services.SentTx{tx(8, 100), tx(9, 100), tx(10, 101), tx(11, 101), tx(12, 150)}, Next: 151, Head: 500},
			wantNonces: []uint64{10, 11, 12}, wantTo: 13, wantFrom: 150,
		},
		{
			name: "progress kept: nonces recorded by an earlier step are not taken again",
			rec:  rec(10, 13, 20), start: 150, margin: 12,
			scan:       services.SentScan{Txs: []services.SentTx{tx(12, 150), tx(13, 150), tx(14, 170)}, Next: 171, Head: 500},
			wantNonces: []uint64{13, 14}, wantTo: 15, wantFrom: 170,
		},
		{
			name: "nothing in the window: the next scan starts after it",
			rec:  rec(10, 10, 20), start: 100, margin: 12,
			scan:   services.SentScan{Next: 356, Head: 5000},
			wantTo: 10, wantFrom: 356,
		},
		{
			name: "nothing up to the head: blocks within the margin are read again",
			rec:  rec(10, 10, 20), start: 400, margin: 12,
			scan:   services.SentScan{Next: 501, Head: 500},
			wantTo: 10, wantFrom: 489, wantHead: true,
		},
		{
			name: "near the start of the chain the margin does not wrap",
			rec:  rec(0, 0, 3), start: 0, margin: 12,
			scan:   services.SentScan{Next: 5, Head: 4},
			wantTo: 0, wantFrom: 0, wantHead: true,
		},
		{
			name: "an endpoint whose head is below the scan's start read nothing: the head is not reached",
			rec:  rec(10, 10, 20), start: 1000, margin: 12,
			scan:   services.SentScan{Next: 1000, Head: 995},
			wantTo: 10, wantFrom: 1000,
		},
		{
			name: "a later nonce before the first unrecorded one: the scan started too late",
			rec:  rec(10, 10, 20), start: 1000, margin: 12,
			scan:   services.SentScan{Txs: []services.SentTx{tx(11, 1000)}, Next: 1001, Head: 5000},
			wantTo: 10, wantFrom: 1000 - maxScanBlocksPerStep, wantTooLate: true,
		},
		{
			name: "nonces at and above the chain's nonce are not the quarantine's",
			rec:  rec(10, 18, 20), start: 100, margin: 12,
			scan:       services.SentScan{Txs: []services.SentTx{tx(18, 100), tx(19, 100), tx(20, 101), tx(21, 101)}, Next: 102, Head: 500},
			wantNonces: []uint64{18, 19}, wantTo: 20, wantFrom: 100,
		},
		{
			name: "a gap after a run ends the run",
			rec:  rec(10, 10, 20), start: 100, margin: 12,
			scan:       services.SentScan{Txs: []services.SentTx{tx(10, 100), tx(12, 101)}, Next: 102, Head: 500},
			wantNonces: []uint64{10}, wantTo: 11, wantFrom: 100,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			plan := planRecoveryStep(tc.rec, tc.start, tc.scan, tc.margin)
			var nonces []uint64
			for _, f := range plan.found {
				nonces = append(nonces, f.Nonce)
			}
			if !slices.Equal(nonces, tc.wantNonces) || plan.recordedTo != tc.wantTo || plan.scanFrom != tc.wantFrom ||
				plan.reachedHead != tc.wantHead || plan.anchorTooLate != tc.wantTooLate {
				t.Errorf("plan: nonces %v, recordedTo %d, scanFrom %d, head %v, too late %v; want %v, %d, %d, %v, %v",
					nonces, plan.recordedTo, plan.scanFrom, plan.reachedHead, plan.anchorTooLate,
					tc.wantNonces, tc.wantTo, tc.wantFrom, tc.wantHead, tc.wantTooLate)
			}
		})
	}
}

// scanOnly is a chain whose scans answer as given: its head, and what a scan from a block
// finds.
type scanOnly struct {
	services.ChainHistory
	scan func(first uint64) services.SentScan
}

func (c scanOnly) ScanSent(_ context.Context, _ common.Address, first, _, _ uint64, _ int) (services.SentScan, error) {
	return c.scan(first), nil
}

func (scanOnly) SentTransactions(context.Context, common.Address, []uint64, uint64) (map[uint64]services.SentTx, error) {
	return map[uint64]services.SentTx{}, nil
}

// finishes records whether the recovery finished, and with which chain nonce.
type finishes struct {
	Store
	finished bool
}

func (s *finishes) RecordRecovered(_ context.Context, _ domain.Lease, txs []RecoveredTx, _ time.Time, _ time.Duration, _ RecoveryProgress) (int, error) {
	return len(txs), nil
}

func (s *finishes) FinishRecovery(context.Context, domain.Lease, uint64, string) (bool, error) {
	s.finished = true
	return true, nil
}

func (s *finishes) AppendEvent(context.Context, services.ServiceEvent) error { return nil }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// An operator's release finishes a recovery whose scan read to the head and found no more:
// never one whose scan read nothing (an endpoint whose head is below the scan's start) or
// started after the first lost transaction. Those nonces would be left unrecorded, and
// their requests' retries executed twice.
func TestARequestedReleaseWaitsForAScanThatReadTheChain(t *testing.T) {
	tests := []struct {
		name string
		scan func(first uint64) services.SentScan
		want bool
	}{
		{"an endpoint behind the scan's start", func(first uint64) services.SentScan { return services.SentScan{Next: first, Head: first - 5} }, false},
		{"a scan that began after the first lost transaction", func(first uint64) services.SentScan {
			return services.SentScan{Txs: []services.SentTx{{Nonce: 130, BlockNumber: first}}, Next: first + 1, Head: first}
		}, false},
		{"a scan that read to the head and found nothing more", func(first uint64) services.SentScan { return services.SentScan{Next: first + 11, Head: first + 10} }, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			leases := services.NewLeaseManager(services.LeaseConfig{Node: "n1"}, nil, wallClock{}, telemetry.Noop(), log.NewStdLogger(io.Discard))
			store := &finishes{}
			r, err := New(Config{Confirmations: 2}, store, nil, scanOnly{scan: tc.scan}, leases, wallClock{}, telemetry.Noop(), log.NewStdLogger(io.Discard))
			if err != nil {
				t.Fatal(err)
			}
			from := uint64(1000)
			rec := Recovery{NonceRange: NonceRange{From: 100, To: 150}, RecoveryProgress: RecoveryProgress{RecordedTo: 120, ScanFrom: &from}, ReleaseRequested: true}
			if _, err := r.RecoverFromChain(context.Background(), domain.Lease{Signer: "0x00000000000000000000000000000000000000aa", Owner: "n1", Token: 1}, rec); err != nil {
				t.Fatal(err)
			}
			if store.finished != tc.want {
				t.Fatalf("finished %v, want %v", store.finished, tc.want)
			}
		})
	}
}
