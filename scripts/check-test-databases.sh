#!/usr/bin/env bash
# check-test-databases.sh before|after FILE: `make test` runs `before` ahead of the tests and
# `after` once they pass; `after` fails, naming them, if the tests left databases behind on
# the server they used.
#
# The test databases are the harnesses': pgtest's per-test databases and schema templates
# (pgtest_<test>_<12 hex>, pgtest_tpl_<schema>_<12 hex>) and txm-testdb's for the client
# module (txm_<hint>_<12 hex>). Only those this run created count: the ones `before` found
# were left by earlier runs (a test binary killed before its cleanup, or a run before a fix)
# and are only reported, never dropped, since another run on the same server may be using
# them right now. FILE holds what `before` found.
set -euo pipefail
export LC_ALL=C # one order for sort and comm
mode=${1:?usage: check-test-databases.sh before|after FILE}
file=${2:?usage: check-test-databases.sh before|after FILE}

# The server the tests find first (lingo-utils/pglocal.FindServer): TEST_DATABASE_URL, else
# the local one (PGTEST_LOCAL_DSN or 127.0.0.1:5432). When neither answers, each test binary
# ran on a throwaway cluster of its own, removed with everything in it when the binary ended.
# Messages name the server, never the URL, which may hold a password.
if [ -n "${TEST_DATABASE_URL:-}" ]; then
	server=$TEST_DATABASE_URL where="the TEST_DATABASE_URL server"
elif [ -n "${PGTEST_LOCAL_DSN:-}" ]; then
	server=$PGTEST_LOCAL_DSN where="the PGTEST_LOCAL_DSN server"
else
	server="postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable&connect_timeout=10"
	where="the local server 127.0.0.1:5432"
fi

if ! command -v psql >/dev/null; then
	if [ "${SKIP_DB_TESTS:-}" = 1 ]; then
		exit 0 # no PostgreSQL client on a machine told to run without databases
	fi
	echo "make test: psql is missing, so the test databases left on $where cannot be counted: apt-get install postgresql-client" >&2
	exit 1
fi

test_databases() {
	psql "$server" -XAtq -v ON_ERROR_STOP=1 \
		-c "SELECT datname FROM pg_database WHERE datname ~ '^(pgtest|txm)_.+_[0-9a-f]{12}\$' ORDER BY 1"
}

case "$mode" in
before)
	mkdir -p "$(dirname "$file")"
	if ! found=$(test_databases 2>/dev/null); then
		echo "unreachable" >"$file"
		exit 0
	fi
	printf '%s\n' "$found" | grep . >"$file" || true
	if [ -s "$file" ]; then
		echo "make test: test databases earlier runs left on $where: $(wc -l <"$file") (they do not count against this run, and stay until dropped with DROP DATABASE ... WITH (FORCE))"
		head -10 "$file" | sed 's/^/  /'
		[ "$(wc -l <"$file")" -le 10 ] || echo "  ..."
	fi
	;;
after)
	if [ "$(cat "$file" 2>/dev/null)" = unreachable ]; then
		if [ -n "${TEST_DATABASE_URL:-}" ]; then
			echo "make test: the TEST_DATABASE_URL server did not answer before the tests, so they made no database there"
		else
			echo "make test: the tests ran on throwaway clusters, which are gone with their databases"
		fi
		exit 0
	fi
	if ! found=$(test_databases); then
		echo "make test: cannot list the databases on $where to check that the tests left none" >&2
		exit 1
	fi
	left=$(comm -13 <(sort "$file" 2>/dev/null) <(printf '%s\n' "$found" | grep . | sort) || true)
	if [ -n "$left" ]; then
		echo "make test: FAIL: the tests left these databases on $where:" >&2
		printf '%s\n' "$left" | sed 's/^/  /' >&2
		echo "A package whose tests create databases with pgtest (testsupport.MigratedDSN included) must call pgtest.Main from its TestMain, which drops its schema templates; a per-test database is dropped by its test's cleanup." >&2
		exit 1
	fi
	echo "make test: no test database left on $where"
	;;
*)
	echo "usage: check-test-databases.sh before|after FILE" >&2
	exit 2
	;;
esac
