package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// answeringChain answers each broadcast with the error set for its raw bytes, and knows the
// hashes in known.
type answeringChain struct {
	services.Chain
	answers  map[string]error
	known    map[common.Hash]bool
	knownErr error
	asked    []common.Hash
}

func (c *answeringChain) SendRawTransactions(_ context.Context, raws [][]byte) ([]error, error) {
	out := make([]error, len(raws))
	for i, raw := range raws {
		out[i] = c.answers[string(raw)]
	}
	return out, nil
}

func (c *answeringChain) TransactionsKnown(_ context.Context, hashes []common.Hash) ([]bool, error) {
	c.asked = append(c.asked, hashes...)
	if c.knownErr != nil {
		return nil, c.knownErr
	}
	out := make([]bool, len(hashes))
	for i, h := range hashes {
		out[i] = c.known[h]
	}
	return out, nil
}

type recordingStore struct {
	pipeline.AttemptStore
	recorded []pipeline.BroadcastOutcome
}

func (s *recordingStore) RecordBroadcasts(_ context.Context, _ domain.Lease, outcomes []pipeline.BroadcastOutcome) error {
	s.recorded = append(s.recorded, outcomes...)
	return nil
}

// The broadcaster asks the node about our hashes only for answers whose meaning depends on
// it, and records what the outcome table says for each; a first send the node accepted is
// the one outcome it does not write (the row already shows SIGNED).
func TestBroadcastRecordsWhatEachAnswerMeans(t *testing.T) {
	nonceTooLow := fmt.Errorf("%w: nonce too low: next nonce 9, tx nonce 3", services.ErrNonceTooLow)
	underpriced := fmt.Errorf("%w: replacement transaction underpriced", services.ErrUnderpriced)
	ours, foreign := common.HexToHash("0x01"), common.HexToHash("0x02")
	tests := []struct {
		name         string
		answer       error
		hashes       []common.Hash
		knownErr     error
		firstSend    bool
		leaseLapsed  bool
		wantSubState domain.SubState
		wantResult   string
		wantAsked    int
		wantWritten  bool
	}{
		{"accepted", nil, []common.Hash{ours}, nil, false, false, domain.SubStateSubmitted, "submitted", 0, true},
		{"accepted on the first send", nil, []common.Hash{ours}, nil, true, false, domain.SubStateSubmitted, "submitted", 0, false},
		{"accepted on the first send after the lease lapsed", nil, []common.Hash{ours}, nil, true, true, domain.SubStateSubmitted, "submitted", 0, true},
		{"underpriced", underpriced, []common.Hash{ours}, nil, false, false, domain.SubStateUnderpriced, "underpriced", 0, true},
		{"underpriced on the first send", underpriced, []common.Hash{ours}, nil, true, false, domain.SubStateUnderpriced, "underpriced", 0, true},
		{"nonce too low with our hash known", nonceTooLow, []common.Hash{foreign, ours}, nil, false, false, domain.SubStateSubmitted, "nonce_too_low_ours", 2, true},
		{"nonce too low, none of ours known", nonceTooLow, []common.Hash{foreign}, nil, false, false, domain.SubStateNonceTaken, "nonce_taken", 1, true},
		{"nonce too low on the first send, none of ours known", nonceTooLow, []common.Hash{foreign}, nil, true, false, domain.SubStateNonceTaken, "nonce_taken", 1, true},
		{"nonce too low, node cannot say", nonceTooLow, []common.Hash{ours}, errors.New("timeout"), false, false, domain.SubStateBroadcastFailed, "error", 1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			chain := &answeringChain{answers: map[string]error{"raw": tc.answer}, known: map[common.Hash]bool{ours: true}, knownErr: tc.knownErr}
			store := &recordingStore{}
			leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a"}, nil, services.SystemClock{}, telemetry.Noop(), log.DefaultLogger)
			b := pipeline.NewBroadcaster(chain, store, leases, telemetry.Noop(), log.DefaultLogger)
			lease := domain.Lease{Signer: "0xaa", Owner: "node-a", Token: 1, ExpiresAt: time.Now().Add(time.Minute), ValidUntil: time.Now().Add(time.Minute)}
			if tc.leaseLapsed {
				lease.ValidUntil = time.Now().Add(-time.Second)
			}
			id := uuid.New()
			outcomes, err := b.Broadcast(t.Context(), lease, []pipeline.BroadcastItem{{TxID: id, Raw: []byte("raw"), Ours: tc.hashes, FirstSend: tc.firstSend}})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantWritten && (len(store.recorded) != 1 || store.recorded[0] != outcomes[0]):
				t.Fatalf("recorded %+v, answered %+v", store.recorded, outcomes)
			case !tc.wantWritten && len(store.recorded) != 0:
				t.Fatalf("recorded %+v, want nothing written", store.recorded)
			}
			got := outcomes[0]
			if got.TxID != id || got.SubState != tc.wantSubState || got.Result != tc.wantResult {
				t.Errorf("outcome %+v, want sub-state %s result %s", got, tc.wantSubState, tc.wantResult)
			}
			if len(chain.asked) != tc.wantAsked {
				t.Errorf("asked the node about %d hashes, want %d", len(chain.asked), tc.wantAsked)
			}
		})
	}
}

// An answer no class knows is counted under its own result and logged once per wording,
// however many transactions and nonces meet it; another wording is logged again.
func TestUnknownAnswersAreLoggedOncePerWording(t *testing.T) {
	unknown := func(msg string) error { return fmt.Errorf("%w: %w", services.ErrUnknownAnswer, errors.New(msg)) }
	chain := &answeringChain{answers: map[string]error{
		"a": unknown("sequencer queue saturated: 5120 slots, nonce 7"),
		"b": unknown("sequencer queue saturated: 5120 slots, nonce 8"),
		"c": unknown("blob sidecar required (got 0 of 2)"),
	}}
	var logs testsupport.LogBuffer
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a"}, nil, services.SystemClock{}, telemetry.Noop(), log.DefaultLogger)
	b := pipeline.NewBroadcaster(chain, &recordingStore{}, leases, telemetry.Noop(), log.NewStdLogger(&logs))
	lease := domain.Lease{Signer: "0xaa", Owner: "node-a", Token: 1, ExpiresAt: time.Now().Add(time.Minute), ValidUntil: time.Now().Add(time.Minute)}
	for range 2 {
		outcomes, err := b.Broadcast(t.Context(), lease, []pipeline.BroadcastItem{{TxID: uuid.New(), Raw: []byte("a")}, {TxID: uuid.New(), Raw: []byte("b")}, {TxID: uuid.New(), Raw: []byte("c")}})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outcomes {
			if o.Result != services.UnknownAnswerResult || o.SubState != domain.SubStateBroadcastFailed {
				t.Fatalf("outcome %+v, want %s and BROADCAST_FAILED", o, services.UnknownAnswerResult)
			}
		}
	}
	const line = "a node answered in words no class knows"
	if n := strings.Count(logs.String(), line); n != 2 {
		t.Fatalf("%d warnings for 6 answers in 2 wordings, want 2:\n%s", n, logs.String())
	}
	for _, phrase := range []string{"sequencer queue saturated", "blob sidecar required"} {
		if !strings.Contains(logs.String(), phrase) {
			t.Errorf("no warning names %q", phrase)
		}
	}
}
