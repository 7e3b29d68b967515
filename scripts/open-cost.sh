#!/usr/bin/env bash
# What opening a store costs after a clean close and after kill -9: loads RECORDS pairs of MIX
# with `halyard bench` (Load A), then opens the store with `halyard inspect` (twice after the
# clean close); a second load is killed with SIGKILL once its store holds 90% of the first one's
# bytes, and the store is opened the same way. Prints one JSON line per open.
#
#   scripts/open-cost.sh RECORDS [MIX] [DIR]      e.g. scripts/open-cost.sh 1300000 LD
#
# Needs `cargo build --release -p halyard`. DIR (default /tmp/halyard-open-cost) is removed first.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release/halyard
records=${1:?usage: scripts/open-cost.sh RECORDS [MIX] [DIR]}
mix=${2:-LD}
dir=${3:-/tmp/halyard-open-cost}
rm -rf "$dir"
args=(bench --engines halyard --records "$records" --workloads load-a --mix "$mix" --keep --quiet)
"$bin" "${args[@]}" --dir "$dir/clean" >/dev/null
store="$dir/clean/halyard-$mix"
bytes=$(du -sb "$store" | cut -f1)
echo "{\"case\": \"clean close\", \"store_bytes\": $bytes, \"open\": $("$bin" inspect --dir "$store" --json)}"
echo "{\"case\": \"clean close, second open\", \"open\": $("$bin" inspect --dir "$store" --json)}"
"$bin" "${args[@]}" --dir "$dir/kill" >/dev/null &
pid=$!
killed="$dir/kill/halyard-$mix"
while kill -0 "$pid" 2>/dev/null; do
  now=$(du -sb "$killed" 2>/dev/null | cut -f1 || echo 0)
  if [ "${now:-0}" -ge $((bytes * 9 / 10)) ]; then kill -9 "$pid"; break; fi
  sleep 0.2
done
wait "$pid" 2>/dev/null || true
now=$(du -sb "$killed" | cut -f1)
echo "{\"case\": \"kill -9\", \"store_bytes\": $now, \"open\": $("$bin" inspect --dir "$killed" --json)}"
echo "{\"case\": \"kill -9, second open\", \"open\": $("$bin" inspect --dir "$killed" --json)}"
rm -rf "$dir"
