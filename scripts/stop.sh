#!/usr/bin/env bash
# stop.sh stops what this project's scripts started, as recorded in .run/:
# every process named by a .run/<name>.pid file (the worker, the simulator,
# the NATS server of scripts/setup.sh, ...), NATS last so the others can
# drain, then the Postgres cluster of .run/postgres.cluster. A pid is only
# signalled while its command line still contains <name>, so a reused pid
# is never killed. Services this project did not start are never touched.
# Safe to run twice.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUN_DIR=.run

say() { printf '%-9s %s\n' "$1:" "$2"; }

as_root() {
	if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi
}

# stop_pidfile stops the process named by pid file $1 if its command line
# still contains $2 (so a reused pid is never killed), then removes the file.
stop_pidfile() {
	local file=$1 want=$2 name
	name=$(basename "$file" .pid)
	local pid
	pid=$(<"$file")
	if [[ ! $pid =~ ^[0-9]+$ ]] || [[ ! -r /proc/$pid/cmdline ]] ||
		! tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$want"; then
		say "$name" "pid ${pid:-?} is not running $want (gone or reused); removing $file"
		rm -f "$file"
		return
	fi
	kill -TERM "$pid"
	local i
	for ((i = 0; i < 100; i++)); do
		[[ -d /proc/$pid ]] || break
		sleep 0.1
	done
	if [[ -d /proc/$pid ]]; then
		say "$name" "pid $pid did not stop within 10s after SIGTERM; left running"
		return 1
	fi
	rm -f "$file"
	say "$name" "stopped pid $pid"
}

stopped=0
shopt -s nullglob
# The worker first, so no run in flight loses its simulator mid-call.
for f in "$RUN_DIR"/worker.pid "$RUN_DIR"/*.pid; do
	[[ -f $f ]] || continue
	[[ $f == "$RUN_DIR/nats.pid" ]] && continue
	stop_pidfile "$f" "$(basename "$f" .pid)"
	stopped=1
done
if [[ -f $RUN_DIR/nats.pid ]]; then
	stop_pidfile "$RUN_DIR/nats.pid" nats
	stopped=1
fi

if [[ -f $RUN_DIR/postgres.cluster ]]; then
	read -r ver cluster <"$RUN_DIR/postgres.cluster"
	if pg_lsclusters -h "$ver" "$cluster" 2>/dev/null | grep -q online; then
		as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$cluster" stop
		say postgres "stopped cluster $ver/$cluster"
	else
		say postgres "cluster $ver/$cluster is not running"
	fi
	rm -f "$RUN_DIR/postgres.cluster"
	stopped=1
fi

[[ $stopped == 1 ]] || say stop "nothing recorded in $RUN_DIR/: nothing to stop"
