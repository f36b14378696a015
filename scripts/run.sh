#!/usr/bin/env bash
# run.sh MAKE_PID COMMAND [ARGS...]: run the service for `make run` so that an interrupt
# stops it (and, through it, its throwaway database) however the interrupt comes:
#
# - Ctrl-C in a terminal reaches the whole foreground process group: make, this script and
#   the service.
# - SIGINT sent to make's pid alone: GNU make does not pass SIGINT on to the recipe it runs
#   (it expects the terminal to have sent it to the group) and waits for the recipe to
#   end, which would be never. It does reset its own handler for the signal first, which
#   /proc shows; this script watches for that and interrupts the service.
# - SIGTERM sent to make: make passes it on to this script, which passes it on.
#
# A program that starts make with SIGINT ignored (POSIX shells do that to `make run &`
# without job control) leaves nothing to receive a SIGINT: use SIGTERM there.
set -uo pipefail
make_pid=$1
shift

"$@" &
service=$!
trap 'kill -INT "$service" 2>/dev/null' INT
trap 'kill -TERM "$service" 2>/dev/null' TERM

# make_catches_sigint: make has a handler for SIGINT (signal 2: bit 1 of SigCgt).
make_catches_sigint() {
	local mask
	mask=$(awk '/^SigCgt:/ {print $2}' "/proc/$make_pid/status" 2>/dev/null)
	[ -n "$mask" ] && (( (16#$mask >> 1) & 1 ))
}

watching=false
make_catches_sigint && watching=true
while kill -0 "$service" 2>/dev/null; do
	if $watching && ! make_catches_sigint; then
		kill -INT "$service" 2>/dev/null
		watching=false
	fi
	sleep 0.2
done
wait "$service"
