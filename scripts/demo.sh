#!/usr/bin/env bash
# demo.sh runs the product on the bundled real sample: sets the machine up,
# starts the LLM simulator (unless LLM_BASE_URL names a real endpoint) and
# a worker in the background, ingests testdata/abcd/messages.jsonl with
# --wait, and prints the summary, a few results and triage items, and the
# failing fields. The services stay up so more files can be ingested;
# `make stop` ends them.
#
# Environment: DATABASE_URL, NATS_URL, LLM_BASE_URL, LLM_API_KEY, LLM_MODEL,
# CONFIG (see docs/configuration.md). DEMO_FILE overrides the sample file, DEMO_SCHEMA
# the schema it is extracted with (default customer_message).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

RUN_DIR=.run
BIN=$RUN_DIR/bin
DEMO_FILE=${DEMO_FILE:-testdata/abcd/messages.jsonl}
DEMO_SCHEMA=${DEMO_SCHEMA:-customer_message}
mkdir -p "$BIN"

say() { printf '%-9s %s\n' "$1:" "$2"; }

scripts/setup.sh

say build "go build ./cmd/... and the simulator (devtools/cmd/llmsim) into $BIN"
go build -o "$BIN/" ./cmd/... ./devtools/cmd/llmsim

running() { [[ -f $RUN_DIR/$1.pid ]] && kill -0 "$(cat "$RUN_DIR/$1.pid")" 2>/dev/null; }

wait_http() {
	local i
	for ((i = 0; i < 100; i++)); do
		if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	return 1
}

if [[ -z ${LLM_BASE_URL:-} ]]; then
	if running llmsim; then
		say llmsim "LLM simulator already running (pid $(cat $RUN_DIR/llmsim.pid))"
	else
		"$BIN/llmsim" >"$RUN_DIR/llmsim.log" 2>&1 &
		echo $! >"$RUN_DIR/llmsim.pid"
		wait_http 127.0.0.1 8089 || { say llmsim "did not start; see $RUN_DIR/llmsim.log"; exit 1; }
		sleep 0.5
		if ! running llmsim; then
			say llmsim "exited (is 127.0.0.1:8089 taken by another checkout's simulator? make stop there):"
			tail -3 "$RUN_DIR/llmsim.log" >&2
			exit 1
		fi
		say llmsim "LLM simulator (not a model) on http://127.0.0.1:8089/v1, log $RUN_DIR/llmsim.log"
	fi
else
	say llm "using $LLM_BASE_URL"
fi

if running worker; then
	say worker "already running (pid $(cat $RUN_DIR/worker.pid))"
else
	"$BIN/worker" >"$RUN_DIR/worker.log" 2>&1 &
	echo $! >"$RUN_DIR/worker.pid"
	sleep 1
	if ! running worker; then
		say worker "exited (is HEALTH_ADDR, default 127.0.0.1:9090, taken? set HEALTH_ADDR):"
		tail -3 "$RUN_DIR/worker.log" >&2
		exit 1
	fi
	say worker "started (pid $(cat "$RUN_DIR/worker.pid")), log $RUN_DIR/worker.log"
fi

say ingest "$DEMO_FILE"
summary=$("$BIN/ingest" -wait -json -timeout 4m -schema "$DEMO_SCHEMA" "$DEMO_FILE")
echo "$summary"
batch=$(sed -n 's/.*"batch_id":"\([^"]*\)".*/\1/p' <<<"$summary")
published=$(sed -n 's/.*"published":\([0-9]*\).*/\1/p' <<<"$summary")
echo
if [[ $published == 0 ]]; then
	say report "every message was already ingested: reporting the batch that ingested $DEMO_FILE with $DEMO_SCHEMA"
	"$BIN/report" -source "$DEMO_FILE" -schema "$DEMO_SCHEMA"
else
	"$BIN/report" -batch "$batch"
fi
echo
say done "services left running; ingest more with: go run ./cmd/ingest --wait --json FILE; stop with: make stop"
