package main

import (
	"regexp"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// Webhook subscriptions through txmctl against a real service (development: loopback
// receivers allowed): created with its secret shown once, listed, paused, resumed, replayed
// and deleted; one taking batches shows its size; hostile ones refused (exit 4) and a
// read-only key refused (exit 5).
func TestWebhookCommands(t *testing.T) {
	admin := service.AdminKey
	step := func(key string, wantCode int, want string, args ...string) string {
		t.Helper()
		code, stdout, stderr := txmctl(t, key, args...)
		if code != wantCode || !strings.Contains(stdout+stderr, want) {
			t.Fatalf("txmctl %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, want, stdout, stderr)
		}
		return stdout
	}
	out := step(admin, exitOK, "shown this once", "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--state", "CONFIRMED", "--description", "txmctl test")
	var id string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "subscription:" {
			id = f[1]
		}
	}
	if id == "" {
		t.Fatalf("no subscription id in %s", out)
	}
	step(admin, exitOK, id, "webhooks", "list")
	step(admin, exitOK, "paused", "webhooks", "pause", id)
	step(admin, exitOK, "active", "webhooks", "resume", id)
	step(admin, exitOK, "cursor", "webhooks", "replay", id, "--cursor", "0")
	step(admin, exitRefused, "scheme", "webhooks", "create", "--url", "ftp://example.com/hook")
	step(admin, exitRefused, "secret", "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--secret", "short")
	step(admin, exitRefused, "filter.states", "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--state", "TRACKING")
	step(admin, exitRefused, "batchSize", "webhooks", "create", "--url", "http://127.0.0.1:9/hook", "--batch", "101")
	batched := step(admin, exitOK, "shown this once", "webhooks", "create", "--url", "http://127.0.0.1:9/batched", "--batch", "100")
	if !regexp.MustCompile(`events a delivery:\s+100\n`).MatchString(batched) {
		t.Fatalf("a subscription created with --batch 100 shows:\n%s", batched)
	}
	step(service.APIKey, exitNotAllowed, "admin", "webhooks", "list")
	step(admin, exitOK, "deleted", "webhooks", "delete", id)
	step(admin, exitNotFound, "no webhook subscription", "webhooks", "show", id)
}

// Funding marks through txmctl: set with a treasury, read back, bad marks refused (exit 4),
// deleted, and gone (exit 3).
func TestFundingCommands(t *testing.T) {
	admin := service.AdminKey
	const watched, treasury = "0x0000000000000000000000000000000000000f0d", servicetest.DevSigner
	step := func(wantCode int, want string, args ...string) {
		t.Helper()
		code, stdout, stderr := txmctl(t, admin, args...)
		if code != wantCode || !strings.Contains(stdout+stderr, want) {
			t.Fatalf("txmctl %s: exit %d, want %d with %q\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, wantCode, want, stdout, stderr)
		}
	}
	step(exitOK, "2000", "signers", "funding", "set", watched, "--low-water", "1000", "--high-water", "2000", "--treasury", treasury)
	step(exitOK, treasury, "signers", "funding", "get", watched)
	step(exitRefused, "highWater", "signers", "funding", "set", watched, "--low-water", "2000", "--high-water", "1000")
	step(exitRefused, "treasury", "signers", "funding", "set", watched, "--low-water", "1", "--high-water", "2", "--treasury", watched)
	step(exitOK, "no longer watching", "signers", "funding", "delete", watched)
	step(exitNotFound, "no funding marks", "signers", "funding", "get", watched)
}
