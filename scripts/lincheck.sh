#!/usr/bin/env bash
# Runs the linearizability checker (tools/lincheck, Go, built on Porcupine) on a history of
# client operations, building it into target/lincheck/lincheck first when the binary is
# missing or older than its sources. All arguments go to the checker, for example:
#   scripts/lincheck.sh --history history.jsonl --html /tmp/lincheck.html
# (scripts/lincheck.sh --help describes the history format). Works from any directory;
# relative paths in the arguments are taken from the current directory.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
src="$root/tools/lincheck"
bin="$root/target/lincheck/lincheck"

if command -v go >/dev/null 2>&1; then
  go=go
elif [ -x /usr/local/go/bin/go ]; then
  go=/usr/local/go/bin/go
else
  echo "lincheck.sh: the Go toolchain ('go') was not found; install Go 1.22 or newer" \
    "from https://go.dev/doc/install and put it on PATH" >&2
  exit 2
fi

# Rebuild when the binary is missing or any source file is newer than it.
if [ ! -x "$bin" ] || [ -n "$(find "$src" -type f \( -name '*.go' -o -name go.mod -o -name go.sum \) \
    -newer "$bin" -print -quit)" ]; then
  echo "lincheck.sh: building $bin" >&2
  mkdir -p "$(dirname "$bin")"
  # A subshell, so that the checker still runs in the caller's directory. A failed build
  # exits 2, not go's 1, which would read as "not linearizable".
  if ! (cd "$src" && "$go" build -buildvcs=false -o "$bin" .); then
    echo "lincheck.sh: building the checker in $src failed" >&2
    exit 2
  fi
  touch "$bin" # go build may leave an up-to-date binary's mtime alone
fi

exec "$bin" "$@"
