package services

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// An approved intent whose admission is refused for the moment, or by a node that is not
// its signer's (every node runs the pass), is tried again; one refused for what it is ends
// REFUSED.
func TestAdmissionMayPassLater(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"another node owns the signer", fmt.Errorf("create: %w", domain.ErrNotLeader), true},
		{"funds", domain.ErrInsufficientFunds, true},
		{"a node that does not hold the signer's key yet", fmt.Errorf("%w: 0xaa", domain.ErrUnknownSigner), true},
		{"a policy's minimum remaining balance", &domain.PolicyDeniedError{Scope: "signer 0xaa", Version: 1, Rule: domain.PolicyRuleMinBalance}, true},
		{"a full window", &domain.PolicyDeniedError{Scope: "signer 0xaa", Version: 1, Rule: domain.PolicyRuleWindowValue}, false},
		{"an approval the policy no longer covers", &domain.PolicyDeniedError{Scope: "signer 0xaa", Version: 2, Rule: domain.PolicyRuleApproval}, false},
		{"a retired signer", domain.ErrSignerRetired, false},
		{"an intent that reverts", errors.Join(domain.ErrIntentReverts, errors.New("execution reverted")), false},
	}
	for _, tt := range tests {
		if got := admissionMayPassLater(tt.err); got != tt.want {
			t.Errorf("%s: may pass later %t, want %t", tt.name, got, tt.want)
		}
	}
}
