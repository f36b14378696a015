#!/usr/bin/env bash
# Fails if the log of a test run ($1; `make secret-scan` makes one with `make test`) holds
# any secret the tests hand to the service: development private keys, the keystore
# passphrase, API keys, the JWT secret and bearer tokens' secret, the database password.
# That includes what the configuration loader, Kratos' logger and the service binary print
# for configuration files that are broken and full of secrets, which two tests feed them.
set -euo pipefail
cd "$(dirname "$0")/.."

log="${1:?usage: scan-test-logs.sh <log of a verbose test run>}"
# More dev accounts than any test funds, so every key a test can use is a pattern.
accounts=64

patterns="$(mktemp /tmp/txm-secrets.XXXXXX)"
trap 'rm -f "$patterns"' EXIT
# Dev keys with and without 0x are both caught by the bare hex.
go run ./txmanager-service/test/cmd/txm-devchain -keys-only -accounts "$accounts" >"$patterns"
# The fixed secrets the service tests configure (kept in step with the tests by grepping them).
grep -rhoE '(clientKey|adminKey|jwtSecret|passphrase|password)\s*=\s*"[^"]{12,}"' \
	--include='*_test.go' txmanager-service lingo-utils | sed -E 's/^[^"]*"([^"]*)"$/\1/' | sort -u >>"$patterns"

count=$(wc -l <"$patterns")
# The dev keys, and at least the API keys, JWT secret and passphrase the tests set.
if [ "$count" -lt $((accounts + 4)) ]; then
	echo "only $count secret patterns found: the scan would prove nothing" >&2
	exit 1
fi
# The tests that break configuration files on purpose print everything the loader and the
# service say about them; a log without them would pass without covering those paths.
for test in TestLoadErrorsNeverQuoteValues TestConfigErrorsNeverReachTheOutput; do
	if ! grep -q "^=== RUN   $test\$" "$log"; then
		echo "the log has no run of $test (a -v run of the txmanager-service tests): the scan would not cover configuration failures" >&2
		exit 1
	fi
done
size=$(wc -c <"$log")
if hits=$(grep -F -c -f "$patterns" "$log"); then
	echo "FAIL: $hits log lines contain a secret:" >&2
	grep -F -n -f "$patterns" "$log" | cut -c1-200 | head -20 >&2
	exit 1
fi
# Bearer tokens are minted at run time, so look for the shape of any JWT instead.
if jwts=$(grep -E -c 'eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.' "$log"); then
	echo "FAIL: $jwts log lines contain a JWT" >&2
	exit 1
fi
echo "scanned $size bytes of test output for $count secrets and for any JWT: none found"
