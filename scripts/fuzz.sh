#!/usr/bin/env bash
# fuzz.sh runs every fuzz target of the repository, each for FUZZTIME
# (default 10s). The targets are found in the source: every
# "func FuzzName(" at the start of a line in a *_test.go file, so a new
# one is picked up without editing this file. go test -fuzz takes one
# target per run, hence one run per package and target.
#
# Environment: FUZZTIME (a go test -fuzztime value: 10s, 1m, 500x),
# GO (default go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

FUZZTIME=${FUZZTIME:-10s}
GO=${GO:-go}

# Lines "dir name", such as "pipeline FuzzParseReply".
targets=$(grep -rE --include='*_test.go' --exclude-dir=.git --exclude-dir=.run \
	'^func Fuzz[A-Za-z0-9_]*\(' . |
	sed -E 's#^(.*)/[^/]*_test\.go:func (Fuzz[A-Za-z0-9_]*)\(.*#\1 \2#' | sort -u)
if [[ -z $targets ]]; then
	echo "fuzz: no func Fuzz... in any *_test.go" >&2
	exit 1
fi

n=$(wc -l <<<"$targets")
i=0
while read -r dir name; do
	i=$((i + 1))
	echo "fuzz: [$i/$n] $dir $name for $FUZZTIME"
	"$GO" test "$dir" -run '^$' -fuzz "^$name\$" -fuzztime "$FUZZTIME"
done <<<"$targets"
echo "fuzz: $n targets, no failure"
