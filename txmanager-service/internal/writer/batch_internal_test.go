package writer

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A writer batch whose commit outcome is unknown must not answer like any other failure:
// its rows may exist, and a client told "unavailable" without a requestId would create
// the transaction twice.
func TestBatchFailureReportsAnUnknownOutcome(t *testing.T) {
	tests := []struct {
		name        string
		err         error
		wantUnknown bool
		wantUnavail bool
	}{
		{"commit outcome unknown", &txmanager.TxError{Kind: txmanager.KindCommitUnknown, Phase: txmanager.PhaseCommit, Err: errors.New("conn closed")}, true, false},
		{"retryable failure that ran out of retries", &txmanager.TxError{Kind: txmanager.KindRetryable, Phase: txmanager.PhaseBegin, Err: errors.New("57P01")}, false, true},
		{"fenced", &domain.FencedError{Signer: "0x1"}, false, false},
		{"other", fmt.Errorf("boom"), false, true},
	}
	for _, tc := range tests {
		err := batchFailure(tc.err)
		if got := errors.Is(err, domain.ErrOutcomeUnknown); got != tc.wantUnknown {
			t.Errorf("%s: outcome unknown = %v, want %v (%v)", tc.name, got, tc.wantUnknown, err)
		}
		var unavailable *domain.UnavailableError
		if got := errors.As(err, &unavailable); got != tc.wantUnavail {
			t.Errorf("%s: unavailable = %v, want %v (%v)", tc.name, got, tc.wantUnavail, err)
		}
	}
}
