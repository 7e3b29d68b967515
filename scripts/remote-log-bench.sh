#!/usr/bin/env bash
# What acknowledging a write only once its log records are on the storage nodes costs
# (`--remote-log pushed`, the default of --storage remote; Nova-LSM's LogC): three storage nodes
# and one processing node on loopback, YCSB Load A through the Redis port, 16 client threads,
# ROUNDS rounds, the setups alternating within each round:
#   local           the store on this machine's device, --sync group
#   lazy            3 storage nodes, --remote-log lazy, --sync group (log out in chunks/group commit)
#   pushed          3 storage nodes, --remote-log pushed, --sync group
#   pushed-none     3 storage nodes, --remote-log pushed, --sync none
#   always          3 storage nodes, --sync always (records synced on the storage nodes' disks)
# Prints per setup the ops/s and p50/p99 latency of each round and their medians.
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   bash scripts/remote-log-bench.sh [RECORDS] [ROUNDS] [MIX]   # defaults 100000, 3, SD
set -euo pipefail
records=${1:-100000}; rounds=${2:-3}; mix=${3:-SD}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
work=$(mktemp -d "${TMPDIR:-/tmp}/remote-log-bench.XXXXXX")
cd "$work"
cleanup() { pkill -9 -f "serve --role storage --dir $work" 2>/dev/null || true; pkill -9 -f "serve --dir $work/p" 2>/dev/null || true; }
trap cleanup EXIT
free_port() { python3 -c "import socket; s=socket.socket(); s.bind(('127.0.0.1',0)); print(s.getsockname()[1])"; }
wait_port() { for _ in $(seq 1 200); do (echo > /dev/tcp/127.0.0.1/$1) 2>/dev/null && return; sleep 0.05; done; echo "port $1 never opened" >&2; exit 1; }
list=""
for i in 1 2 3; do
  port=$(free_port)
  ( RUST_LOG=warn "$B" serve --role storage --dir "$work/s$i" --listen 127.0.0.1:$port --cluster-secret bench > s$i.log 2>&1 & )
  wait_port "$port"
  list="$list${list:+,}127.0.0.1:$port"
done
remote=(--storage remote --storage-nodes "$list" --stripe-width 2)
flags_of() {
  case $1 in
    local) echo "--sync group" ;;
    lazy) echo "${remote[*]} --remote-log lazy --sync group" ;;
    pushed) echo "${remote[*]} --remote-log pushed --sync group" ;;
    pushed-none) echo "${remote[*]} --remote-log pushed --sync none" ;;
    always) echo "${remote[*]} --sync always" ;;
  esac; }
# run SETUP ROUND: a fresh processing node (its own store name), Load A; prints "OPS P50 P99".
run() {
  local name=$1-$2 resp native http
  resp=$(free_port); native=$(free_port); http=$(free_port)
  # shellcheck disable=SC2046
  RUST_LOG=warn "$B" serve --dir "$work/p-$name" --node "p-$name" --cluster-secret bench --resp 127.0.0.1:$resp \
    --listen 127.0.0.1:$native --http 127.0.0.1:$http --cache-mb 64 $(flags_of "$1") > p-$name.log 2>&1 &
  local pid=$!
  wait_port "$resp"
  "$B" bench --target resp://127.0.0.1:$resp --records "$records" --ops 1 --threads 16 --workloads load-a \
    --mix "$mix" --quiet --json "$name.json" > "$name.txt" 2>&1 || tail -3 "$name.txt" >&2
  kill "$pid"; wait "$pid" 2>/dev/null || true
  python3 -c "
import json
r = [x for x in json.load(open('$name.json'))['results'] if x.get('workload') == 'load-a'][0]
print(round(r['ops_per_sec']), r['latency_us']['p50'], r['latency_us']['p99'])"
}
setups=(local lazy pushed pushed-none always)
declare -A ops p50 p99
for r in $(seq 1 "$rounds"); do
  for s in "${setups[@]}"; do
    read -r o a b < <(run "$s" "$r")
    ops[$s]="${ops[$s]:-} $o"; p50[$s]="${p50[$s]:-} $a"; p99[$s]="${p99[$s]:-} $b"
    echo "round $r $s: $o ops/s, p50 $a us, p99 $b us" >&2
  done
done
med() { python3 -c "import statistics,sys; print(statistics.median(float(x) for x in sys.argv[1:]))" "$@"; }
echo "Load A, $records records, mix $mix, 16 threads, $rounds rounds (3 storage nodes on loopback, stripe width 2)"
printf "%-12s %-28s %10s %10s %10s\n" setup "ops/s (rounds)" "median" "p50 us" "p99 us"
for s in "${setups[@]}"; do
  # shellcheck disable=SC2086
  printf "%-12s %-28s %10.0f %10.1f %10.1f\n" "$s" "${ops[$s]# }" "$(med ${ops[$s]})" "$(med ${p50[$s]})" "$(med ${p99[$s]})"
done
