#!/usr/bin/env bash
# Replicated throughput on a cluster coordinated by etcd: a fresh etcd and 3 local
# `halyard serve --etcd` nodes, 32 regions cut over the benchmark's keys, COPIES copies each
# (1: no replication), YCSB Load A and Run A, SD, 16 threads, through the region-aware native
# client (`halyard bench --target halyard://` one node: the client reads the map there).
#   cargo build --release -p halyard           # or HALYARD_BIN=path/to/halyard
#   bash scripts/etcd-bench.sh COPIES OUT.json      # the table goes to OUT.json.txt
# Needs etcd (apt-get install etcd-server); uses ports 24790, 24800 and 25401..29403.
set -euo pipefail
copies=$1; out=$(realpath -m "$2")
B=${HALYARD_BIN:-"$(cd "$(dirname "$0")/.." && pwd)/target/release/halyard"}
source "$(dirname "$(realpath "$0")")/etcd-local.sh"
root=$(mktemp -d); cd "$root"
start_etcd 24790 24800
trap "kill \$ETCD 2>/dev/null; pkill -f \"halyard serve --dir n\" 2>/dev/null; true" EXIT
$B cluster init --etcd $E --regions 32 --replicas $copies --bench-keys --no-merge >/dev/null
pids=()
for i in 1 2 3; do
  RUST_LOG=warn $B serve --dir n$i --etcd $E --node n$i --listen 127.0.0.1:2540$i --resp 127.0.0.1:2640$i \
    --http 127.0.0.1:2940$i --replication-listen 127.0.0.1:2840$i --cache-mb 64 > n$i.log 2>&1 &
  pids+=($!)
done
for t in $(seq 1 100); do
  if $B cluster status --etcd $E --json | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(r['primary_alive'] and len(r['backups'])+1==$copies for r in s['regions']) and not s['log'] else 1)"; then break; fi
  sleep 0.2
done
sleep 0.5
$B bench --target halyard://127.0.0.1:25401 --records 300000 --ops 300000 --threads 16 --workloads load-a,run-a --mix SD --quiet --json "$out" > "$out.txt" 2>&1 || true
kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true
kill $ETCD; wait $ETCD 2>/dev/null || true
cd /; rm -rf "$root"
