#!/usr/bin/env bash
# setup.sh makes this machine ready for `make demo` and `make test`: a
# Postgres on 127.0.0.1:5432, a NATS server with JetStream, and the
# database migrated; with WITH_CHROMIUM=1 and WITH_PGBOUNCER=1 (what
# `make test` sets) also Debian's chromium and pgbouncer. Written for
# Debian with Go installed; safe to run again and again.
#
# It never touches a service that already runs:
#   - Postgres: if DATABASE_URL's server accepts connections, it is left as
#     is. Otherwise, for a local 127.0.0.1:5432 only, Debian's postgresql is
#     installed if missing and its cluster started; for that cluster (and
#     only that one) pg_hba.conf gets trust auth on its 127.0.0.1 and ::1
#     host lines, so postgres://postgres@127.0.0.1:5432/... works.
#   - NATS: if NATS_URL's port is open, it is left as is. Otherwise, on a
#     local address, Debian's nats-server -js is started if installed, else
#     devtools/cmd/natsd is built and started. Logs, pid files and JetStream data go
#     to .run/ (scripts/stop.sh stops what it started).
#   - Chromium: only with WITH_CHROMIUM=1, Debian's chromium is installed
#     if missing (the triage UI's end-to-end test drives it headless; it
#     needs root or sudo). `make demo` and `make setup` leave it out.
#   - PgBouncer: only with WITH_PGBOUNCER=1, Debian's pgbouncer is installed
#     if missing (tests start private ones on free ports, in transaction
#     pooling; root or sudo). The package's own service, which the install
#     may start, is stopped and disabled: nothing here uses it. `make demo`
#     and `make setup` leave it out.
#   - Migrations: go run ./cmd/migrate up (creates the database if missing).
#
# Environment:
#   DATABASE_URL   default postgres://postgres@127.0.0.1:5432/extractq?sslmode=disable
#   NATS_URL       default nats://127.0.0.1:4222
#   SKIP_MIGRATE=1 leave the migrations out
#   WITH_CHROMIUM=1 install Debian's chromium if missing (for the triage
#                  browser test; `make test` sets it)
#   WITH_PGBOUNCER=1 install Debian's pgbouncer if missing (for the tests
#                  through PgBouncer; `make test` sets it)
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
RUN_DIR=.run

export DATABASE_URL="${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/extractq?sslmode=disable}"
export NATS_URL="${NATS_URL:-nats://127.0.0.1:4222}"

say() { printf '%-9s %s\n' "$1:" "$2"; }
die() { say "$1" "$2" >&2; exit 1; }

# url_hostport prints host and port of a URL (scheme://[user@]host[:port]/...),
# with the given default port.
url_hostport() {
	local rest=${1#*://}
	rest=${rest%%/*}
	rest=${rest%%\?*}
	rest=${rest##*@}
	local host=${rest%:*} port=${rest##*:}
	if [[ $rest != *:* ]]; then host=$rest port=$2; fi
	host=${host#[}; host=${host%]}
	printf '%s %s\n' "${host:-127.0.0.1}" "${port:-$2}"
}

is_local() { [[ $1 == 127.0.0.1 || $1 == localhost || $1 == ::1 ]]; }

# port_open reports whether host:port accepts a TCP connection.
port_open() {
	timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null
}

# wait_port waits up to $3 seconds for host:port to open.
wait_port() {
	local i
	for ((i = 0; i < $3 * 5; i++)); do
		port_open "$1" "$2" && return 0
		sleep 0.2
	done
	return 1
}

as_root() {
	if [[ $(id -u) == 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null; then
		sudo "$@"
	else
		die setup "need root (or sudo) for: $*"
	fi
}

# ---- Postgres ---------------------------------------------------------------

pg_ready() {
	if command -v pg_isready >/dev/null; then
		pg_isready -q -h "$1" -p "$2" -t 2
	else
		port_open "$1" "$2"
	fi
}

# hba_trust_local rewrites pg_hba.conf file $1 so its "host all all"
# lines for 127.0.0.1/32 and ::1/128 use trust (adding them if there are
# none), keeping a copy as $1.before-extractq. It returns 1 when the file
# already trusts both and is left unchanged.
hba_trust_local() {
	local hba=$1
	local re='^(host[[:space:]]+all[[:space:]]+all[[:space:]]+(127\.0\.0\.1/32|::1/128)[[:space:]]+)[a-z0-9-]+[[:space:]]*$'
	local lines
	lines=$(as_root grep -E "$re" "$hba" || true)
	if grep -q '127\.0\.0\.1/32' <<<"$lines" && grep -q '::1/128' <<<"$lines" &&
		! grep -Evq '[[:space:]]trust[[:space:]]*$' <<<"$lines"; then
		return 1
	fi
	as_root test -f "$hba.before-extractq" || as_root cp -p "$hba" "$hba.before-extractq"
	as_root sed -E -i "s#$re#\\1trust#" "$hba"
	lines=$(as_root grep -E "$re" "$hba" || true)
	if ! grep -q '127\.0\.0\.1/32' <<<"$lines"; then
		printf 'host    all             all             127.0.0.1/32            trust\n' | as_root tee -a "$hba" >/dev/null
	fi
	if ! grep -q '::1/128' <<<"$lines"; then
		printf 'host    all             all             ::1/128                 trust\n' | as_root tee -a "$hba" >/dev/null
	fi
}

# pg_trust_local gives cluster $1/main trust auth on 127.0.0.1 and ::1 and
# reloads it if that changed anything.
pg_trust_local() {
	local hba=/etc/postgresql/$1/main/pg_hba.conf
	as_root test -f "$hba" || die postgres "$hba not found"
	if ! hba_trust_local "$hba"; then
		say postgres "pg_hba.conf already trusts 127.0.0.1 and ::1"
		return
	fi
	as_root pg_ctlcluster --skip-systemctl-redirect "$1" main reload
	say postgres "pg_hba.conf: trust for 127.0.0.1 and ::1 (old file kept as pg_hba.conf.before-extractq), reloaded"
}

setup_postgres() {
	local host port
	read -r host port < <(url_hostport "$DATABASE_URL" 5432)
	if pg_ready "$host" "$port"; then
		if [[ -f $RUN_DIR/postgres.cluster ]]; then
			# Started by an earlier run of this script: finish its setup.
			pg_trust_local "$(cut -d' ' -f1 "$RUN_DIR/postgres.cluster")"
		fi
		say postgres "$host:$port accepts connections, left as is"
		return
	fi
	if ! is_local "$host" || [[ $port != 5432 ]]; then
		die postgres "$host:$port does not accept connections; only a local 127.0.0.1:5432 is started here"
	fi

	if ! compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null; then
		say postgres "not installed: apt-get install postgresql"
		as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
		as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
	fi
	local ver
	ver=$(find /usr/lib/postgresql -mindepth 1 -maxdepth 1 -printf '%f\n' | sort -n | tail -n 1)
	[[ -n $ver ]] || die postgres "no version under /usr/lib/postgresql"
	if [[ ! -d /etc/postgresql/$ver/main ]]; then
		say postgres "creating cluster $ver/main"
		as_root pg_createcluster "$ver" main >/dev/null
	fi
	say postgres "starting cluster $ver/main"
	as_root pg_ctlcluster --skip-systemctl-redirect "$ver" main start
	printf '%s main\n' "$ver" >"$RUN_DIR/postgres.cluster"
	wait_port 127.0.0.1 5432 30 || die postgres "cluster $ver/main started but 127.0.0.1:5432 is closed"
	pg_trust_local "$ver"
	pg_ready 127.0.0.1 5432 || die postgres "127.0.0.1:5432 not ready"
	say postgres "cluster $ver/main ready on 127.0.0.1:5432 (stop it with scripts/stop.sh)"
}

# ---- NATS -------------------------------------------------------------------

# alive reports whether the pid in file $1 runs a command line containing $2.
alive() {
	[[ -f $1 ]] || return 1
	local pid
	pid=$(<"$1")
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$2"
}

setup_nats() {
	local host port
	read -r host port < <(url_hostport "$NATS_URL" 4222)
	if port_open "$host" "$port"; then
		say nats "$host:$port open, left as is"
		return
	fi
	is_local "$host" || die nats "$host:$port is closed; only a local server is started here"

	local pidfile=$RUN_DIR/nats.pid log=$RUN_DIR/nats.log
	if alive "$pidfile" "nats"; then
		say nats "pid $(<"$pidfile") from an earlier run is starting; waiting"
	else
		rm -f "$pidfile"
		local cmd
		if command -v nats-server >/dev/null; then
			cmd=(nats-server -js -a "$host" -p "$port" -sd "$RUN_DIR/nats-store")
			say nats "starting nats-server -js on $host:$port"
		else
			say nats "nats-server not installed: building devtools/cmd/natsd"
			go build -o "$RUN_DIR/natsd" ./devtools/cmd/natsd
			cmd=("$RUN_DIR/natsd" -addr "$host:$port" -store-dir "$RUN_DIR/natsd-store")
			say nats "starting devtools/cmd/natsd on $host:$port"
		fi
		setsid "${cmd[@]}" >>"$log" 2>&1 </dev/null &
		echo $! >"$pidfile"
	fi
	if ! wait_port "$host" "$port" 30; then
		tail -n 20 "$log" >&2 || true
		die nats "$host:$port still closed after 30s (log: $log)"
	fi
	say nats "ready on $host:$port, pid $(<"$pidfile"), log $log"
}

# ---- Chromium (the triage UI's browser test) -------------------------------------

# setup_chromium installs Debian's chromium when WITH_CHROMIUM=1 and it is
# missing, for the triage end-to-end test (which skips without it unless CI
# is set).
setup_chromium() {
	if [[ ${WITH_CHROMIUM:-} != 1 ]]; then
		return
	fi
	if command -v chromium >/dev/null; then
		say chromium "$(command -v chromium), left as is"
		return
	fi
	if ! command -v apt-get >/dev/null; then
		say chromium "not installed and no apt-get: the triage browser test will skip (or fail with CI set)"
		return
	fi
	say chromium "not installed: apt-get install chromium"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
	say chromium "installed: $(command -v chromium)"
}

# ---- PgBouncer (the tests through a transaction pooler) ----------------------

# pgbouncer_path prints the pgbouncer binary, which Debian puts in
# /usr/sbin (often not on a user's PATH), or fails.
pgbouncer_path() {
	command -v pgbouncer 2>/dev/null || { [[ -x /usr/sbin/pgbouncer ]] && echo /usr/sbin/pgbouncer; }
}

# setup_pgbouncer installs Debian's pgbouncer when WITH_PGBOUNCER=1 and it
# is missing, for the tests that start a private one (they skip without it
# unless CI is set). It starts none itself.
setup_pgbouncer() {
	if [[ ${WITH_PGBOUNCER:-} != 1 ]]; then
		return
	fi
	local bin
	if bin=$(pgbouncer_path); then
		say pgbouncer "$bin, left as is"
		return
	fi
	if ! command -v apt-get >/dev/null; then
		say pgbouncer "not installed and no apt-get: the PgBouncer tests will skip (or fail with CI set)"
		return
	fi
	say pgbouncer "not installed: apt-get install pgbouncer"
	as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >/dev/null
	# The package enables (and on systemd machines starts) its own
	# service on port 6432; the tests never use it.
	if command -v systemctl >/dev/null && systemctl is-enabled --quiet pgbouncer 2>/dev/null; then
		if as_root systemctl disable --now --quiet pgbouncer 2>/dev/null; then
			say pgbouncer "the package's own service stopped and disabled (tests start their own)"
		fi
	fi
	bin=$(pgbouncer_path) || die pgbouncer "installed, but no pgbouncer binary found"
	say pgbouncer "installed: $bin"
}

# ---- Migrations ---------------------------------------------------------------

setup_migrations() {
	if [[ ${SKIP_MIGRATE:-} == 1 ]]; then
		say migrate "skipped (SKIP_MIGRATE=1)"
		return
	fi
	compgen -G 'cmd/migrate/*.go' >/dev/null || die migrate "cmd/migrate not found"
	say migrate "go run ./cmd/migrate up"
	LOG_LEVEL=warn go run ./cmd/migrate up
	say migrate "done"
}

main() {
	command -v go >/dev/null || die setup "go is not on PATH"
	mkdir -p "$RUN_DIR"
	[[ -f $RUN_DIR/.gitignore ]] || printf '*\n' >"$RUN_DIR/.gitignore"
	setup_postgres
	setup_nats
	setup_chromium
	setup_pgbouncer
	setup_migrations
	say setup "ready: DATABASE_URL=$DATABASE_URL NATS_URL=$NATS_URL"
}

# Sourcing the file (for testing its functions) runs nothing.
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	main "$@"
fi
