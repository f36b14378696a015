package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// Approvals through txmctl against a real service: a transfer above the signer's approval
// threshold waits; it is listed; its requester cannot approve it (exit 5, APPROVAL_FORBIDDEN);
// another credential's approval admits it and `tx wait` sees it confirmed; a second one is
// rejected and ends REJECTED; a vote on a closed approval is refused (exit 4).
func TestApprovalCommands(t *testing.T) {
	dir := t.TempDir()
	policy := filepath.Join(dir, "approval.json")
	if err := os.WriteFile(policy, []byte(`{"approval":{"aboveValue":"1000","approvers":1,"expiresAfter":"10m"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	step := func(key string, wantCode int, want string, args ...string) string {
		t.Helper()
		code, stdout, stderr := txmctl(t, key, args...)
		if code != wantCode || !strings.Contains(stdout+stderr, want) {
			t.Fatalf("txmctl %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, want, stdout, stderr)
		}
		return stdout
	}
	step(service.AdminKey, exitOK, "version", "policy", "set", "signer", servicetest.DevSigner, "--file", policy)
	t.Cleanup(func() { txmctl(t, service.AdminKey, "policy", "delete", "signer", servicetest.DevSigner) })
	step(service.AdminKey, exitRefused, "approval.role", "policy", "set", "signer", servicetest.DevSigner, "--file",
		writeFile(t, dir, "role.json", `{"approval":{"aboveValue":"1","approvers":1,"role":"treasury"}}`))

	run := fmt.Sprintf("approval-%d", time.Now().UnixNano())
	waiting, err := tryTransfer(t, run+"-a", "5000")
	if err != nil || waiting.GetTx().GetState() != "AWAITING_APPROVAL" {
		t.Fatalf("a transfer above the threshold: %v %v, want AWAITING_APPROVAL", waiting, err)
	}
	id := waiting.GetTx().GetTxId()
	step(service.AdminKey, exitOK, id, "approvals", "list", "--state", "AWAITING_APPROVAL")
	step(service.APIKey, exitNotAllowed, "own request", "approvals", "approve", id)
	step(service.AdminKey, exitOK, "APPROVED", "approvals", "approve", id, "--note", "invoice checked")
	step(service.APIKey, exitOK, "CONFIRMED", "tx", "wait", id)
	step(service.AdminKey, exitOK, "invoice checked", "approvals", "show", id)

	second, err := tryTransfer(t, run+"-b", "6000")
	if err != nil || second.GetTx().GetState() != "AWAITING_APPROVAL" {
		t.Fatalf("the second transfer: %v %v", second, err)
	}
	step(service.AdminKey, exitUsage, "note", "approvals", "reject", second.GetTx().GetTxId())
	step(service.AdminKey, exitOK, "REJECTED", "approvals", "reject", second.GetTx().GetTxId(), "--note", "duplicate payout")
	step(service.APIKey, exitOK, "REJECTED", "tx", "get", second.GetTx().GetTxId())
	step(service.APIKey, exitTxFailed, "duplicate payout", "tx", "wait", second.GetTx().GetTxId())
	step(service.AdminKey, exitRefused, "APPROVAL_CLOSED", "approvals", "approve", second.GetTx().GetTxId())
	step(service.AdminKey, exitNotFound, "no approval", "approvals", "show", "01a2269c-ebf2-78ec-aa33-35cdbb277a0c")
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
