package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// The safety rails through txmctl against a real service: a policy on the caller's
// credential refuses a create with POLICY_DENIED and lets it through once changed; a paused
// signer refuses creates with SIGNER_PAUSED until resumed; every change is in the audit
// trail, which verifies until a record is edited in SQL, and then names that record.
func TestPolicyPauseAndAuditCommands(t *testing.T) {
	admin := service.AdminKey
	dir := t.TempDir()
	write := func(name, doc string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	step := func(wantCode int, want string, args ...string) string {
		t.Helper()
		code, stdout, stderr := txmctl(t, admin, args...)
		out := stdout + stderr
		if code != wantCode || !strings.Contains(out, want) {
			t.Fatalf("txmctl %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, want, stdout, stderr)
		}
		return stdout
	}
	run := fmt.Sprintf("rails-%d", time.Now().UnixNano())

	step(exitOK, "version", "policy", "set", "credential", "client-tests", "--file", write("strict.json", `{"maxValuePerTx":"5","windows":[{"period":"24h","maxValue":"1000000"}]}`))
	_, err := tryTransfer(t, run+"-big", "6")
	if !v1.IsPolicyDenied(err) || !strings.Contains(err.Error(), "maxValuePerTx") {
		t.Fatalf("a transfer of 6 wei under maxValuePerTx 5: %v, want POLICY_DENIED naming the rule", err)
	}
	if _, err := tryTransfer(t, run+"-small", "5"); err != nil {
		t.Fatalf("a transfer of 5 wei under maxValuePerTx 5: %v", err)
	}
	step(exitRefused, "maxValuePerTx", "policy", "set", "credential", "client-tests", "--file", write("negative.json", `{"maxValuePerTx":"-1"}`))
	step(exitRefused, "scopeKind", "policy", "set", "team", "client-tests", "--file", write("ok.json", `{"maxValuePerTx":"1"}`))
	step(exitRefused, "selector", "policy", "set", "signer", servicetest.DevSigner, "--file", write("selector.json", `{"destinations":[{"address":"`+servicetest.Recipient+`","selectors":["0xa9059c"]}]}`))
	step(exitRefused, "address", "policy", "set", "signer", servicetest.DevSigner, "--file", write("address.json", `{"destinations":[{"address":"0x12"}]}`))
	step(exitOK, "deleted (version 2)", "policy", "delete", "credential", "client-tests")
	step(exitOK, "(deleted)", "policy", "versions", "credential", "client-tests")
	if _, err := tryTransfer(t, run+"-big-again", "6"); err != nil {
		t.Fatalf("a transfer of 6 wei once the policy is deleted: %v", err)
	}

	step(exitOK, "paused by", "signers", "pause", servicetest.DevSigner, "--note", "rotating the API key")
	if _, err := tryTransfer(t, run+"-paused", "1"); !v1.IsSignerPaused(err) {
		t.Fatalf("a transfer from a paused signer: %v, want SIGNER_PAUSED", err)
	}
	step(exitOK, servicetest.DevSigner, "signers", "resume", servicetest.DevSigner, "--note", "rotated")
	if _, err := tryTransfer(t, run+"-resumed", "1"); err != nil {
		t.Fatalf("a transfer once resumed: %v", err)
	}

	out := step(exitOK, "policy.set", "audit", "list", "--actor", "operator")
	for _, action := range []string{"policy.delete", "signer.pause", "signer.resume"} {
		if !strings.Contains(out, action) {
			t.Errorf("audit list lacks %s:\n%s", action, out)
		}
	}
	step(exitOK, "audit trail intact", "audit", "verify")

	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Fatalf("psql is needed to edit an audit record behind the service's back (apt-get install postgresql-client): %v", err)
	}
	edit := exec.Command(psql, "-v", "ON_ERROR_STOP=1", "-d", service.DSN(), "-c",
		`UPDATE audit_record SET after = '{"maxValuePerTx":"1000000000000000000000"}' WHERE seq = 2`)
	if out, err := edit.CombinedOutput(); err != nil {
		t.Fatalf("edit an audit record: %v: %s", err, out)
	}
	out = step(exitAuditBroken, "BROKEN at record 2", "audit", "verify")
	t.Logf("after the edit: %s", strings.TrimSpace(out))
}
