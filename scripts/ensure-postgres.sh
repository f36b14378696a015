#!/usr/bin/env bash
# ensure-postgres.sh test|run: make sure the tests (or `make run`) will find PostgreSQL.
#
# Both fall back to a throwaway cluster started from the installed server binaries, so a
# fresh machine needs those binaries. When they are missing this installs them (Debian's
# `postgresql`, and `pgbouncer` for the tests) if it runs as root with apt, saying what and
# why first, without recommended packages (the binaries are in the packages themselves);
# otherwise it fails with the one command to run. A database the caller named
# (TEST_DATABASE_URL for the tests, DATABASE_URL for run) or SKIP_DB_TESTS=1 needs no
# binaries.
set -euo pipefail
mode=${1:?usage: ensure-postgres.sh test|run}

have_server_binaries() {
	if [ -n "${PG_BINDIR:-}" ]; then
		[ -x "$PG_BINDIR/initdb" ] && [ -x "$PG_BINDIR/postgres" ]
		return
	fi
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null
}

can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && [ -z "${PG_BINDIR:-}" ]; }

# apt_install why package...: one line saying what is installed and why, then the install.
apt_install() {
	local why=$1
	shift
	echo "ensure-postgres: installing Debian packages $* (apt-get, without recommends): $why" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends "$@" >/dev/null; }
}

# The machine's usual server answers on 127.0.0.1:5432 (unless the tests were pointed
# elsewhere with PGTEST_LOCAL_DSN).
local_server_up() {
	[ -z "${PGTEST_LOCAL_DSN:-}" ] && (exec 3<>/dev/tcp/127.0.0.1/5432) 2>/dev/null
}

case "$mode" in
test)
	[ "${SKIP_DB_TESTS:-}" = 1 ] && exit 0
	if ! command -v pgbouncer >/dev/null && can_apt; then
		apt_install "the PgBouncer tests (pglocal, the service through a transaction-mode pooler) run a real pgbouncer" pgbouncer || true
	fi
	[ -n "${TEST_DATABASE_URL:-}" ] && exit 0
	hint="set TEST_DATABASE_URL=postgres://user@host:port/db, or run without database tests: SKIP_DB_TESTS=1 make test"
	why="the database tests start a throwaway PostgreSQL cluster from its server binaries (SKIP_DB_TESTS=1 skips them)"
	;;
run)
	[ -n "${DATABASE_URL:-}" ] && exit 0
	hint="or set DATABASE_URL=postgres://user@host:port/db"
	why="make run starts a local PostgreSQL cluster when DATABASE_URL is not set"
	;;
*)
	echo "usage: ensure-postgres.sh test|run" >&2; exit 2 ;;
esac

have_server_binaries && exit 0
if can_apt; then
	apt_install "$why" postgresql && have_server_binaries && exit 0
fi
[ "$mode" = test ] && local_server_up && exit 0
where="on this machine"
[ -n "${PG_BINDIR:-}" ] && where="in PG_BINDIR=$PG_BINDIR"
cat >&2 <<MSG
ensure-postgres: no PostgreSQL server binaries (initdb, postgres) $where, so no throwaway
database can be started. Install them:

    sudo apt-get install --no-install-recommends postgresql

$hint
MSG
exit 1
