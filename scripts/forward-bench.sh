#!/usr/bin/env bash
# The cost of forwarding Redis commands in a cluster: YCSB Load A and Run A, SD, 16 threads,
# 300k records and operations, RUNS rounds of three setups run one after the other in each
# round (the same machine, the same minute):
#   resp-any  3 nodes on etcd, 32 regions of 2 copies cut over the benchmark's Redis keys
#             (`cluster init --redis --bench-keys`), every request sent to node 1's Redis
#             port: the two thirds of requests whose region another node leads are forwarded;
#   native    the same cluster cut over the native keys, the region-aware native client
#             (`--target halyard://` node 1: it reads the map there and goes to each primary);
#   single    one `halyard serve` with no cluster, its Redis port.
#   cargo build --release -p halyard           # or HALYARD_BIN=path/to/halyard
#   bash scripts/forward-bench.sh RUNS OUTDIR    # OUTDIR/<setup>-<round>.json, and a table
# Needs etcd (apt-get install etcd-server); uses ports 24790, 24800 and 25401..29403.
set -euo pipefail
runs=$1; outdir=$(realpath -m "$2"); mkdir -p "$outdir"
B=${HALYARD_BIN:-"$(cd "$(dirname "$0")/.." && pwd)/target/release/halyard"}
E=http://127.0.0.1:24790
BENCH=(--records 300000 --ops 300000 --threads 16 --workloads load-a,run-a --mix SD --quiet)

cluster() { # $1: extra `cluster init` flags; starts etcd and 3 nodes in the current directory
  etcd --logger zap --log-level error --data-dir etcd --listen-client-urls $E --advertise-client-urls $E \
    --listen-peer-urls http://127.0.0.1:24800 --initial-advertise-peer-urls http://127.0.0.1:24800 \
    --initial-cluster default=http://127.0.0.1:24800 --experimental-enable-lease-checkpoint >/dev/null 2>&1 &
  sleep 1.5
  # shellcheck disable=SC2086
  $B cluster init --etcd $E --regions 32 --replicas 2 --bench-keys $1 --no-merge >/dev/null
  for i in 1 2 3; do
    RUST_LOG=warn $B serve --dir n$i --etcd $E --node n$i --listen 127.0.0.1:2540$i --resp 127.0.0.1:2640$i \
      --http 127.0.0.1:2940$i --replication-listen 127.0.0.1:2840$i --cache-mb 64 > n$i.log 2>&1 &
  done
  for _ in $(seq 1 150); do
    if $B cluster status --etcd $E --json 2>/dev/null | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(r['primary_alive'] and len(r['backups'])==1 for r in s['regions']) and not s['log'] else 1)"; then break; fi
    sleep 0.2
  done
  sleep 1 # every node follows the settled map
}

stop() { pkill -f "halyard serve --dir n" 2>/dev/null || true; pkill -x etcd 2>/dev/null || true; sleep 1; }
trap stop EXIT

for r in $(seq 1 "$runs"); do
  for setup in resp-any native single; do
    root=$(mktemp -d); cd "$root"
    case $setup in
      resp-any) cluster --redis; target=resp://127.0.0.1:26401 ;;
      native) cluster ""; target=halyard://127.0.0.1:25401 ;;
      single)
        RUST_LOG=warn $B serve --dir n1 --listen 127.0.0.1:25401 --resp 127.0.0.1:26401 --http 127.0.0.1:29401 \
          --cache-mb 64 > n1.log 2>&1 &
        sleep 1; target=resp://127.0.0.1:26401 ;;
    esac
    $B bench --target $target "${BENCH[@]}" --json "$outdir/$setup-$r.json" > "$outdir/$setup-$r.txt" 2>&1 || true
    stop; cd /; rm -rf "$root"
  done
done

python3 - "$outdir" "$runs" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def ops(setup, r, w):
    try:
        d = json.load(open(f"{out}/{setup}-{r}.json"))
        return next(x["ops_per_sec"] for x in d["results"] if x["workload"] == w)
    except Exception:
        return float("nan")
print("| phase | resp-any ops/s (runs) | native ops/s | single ops/s | resp-any / native | resp-any / single |")
print("|---|---|---|---|---|---|")
for w in ["load-a", "run-a"]:
    v = {s: [ops(s, r, w) for r in range(1, runs + 1)] for s in ["resp-any", "native", "single"]}
    med = {s: statistics.median(x) for s, x in v.items()}
    ra = [a / b for a, b in zip(v["resp-any"], v["native"])]
    rs = [a / b for a, b in zip(v["resp-any"], v["single"])]
    f = lambda x: " / ".join(f"{y:,.0f}" for y in x)
    print(f"| {w} | {f(v['resp-any'])} | {f(v['native'])} | {f(v['single'])} | "
          f"{statistics.median(ra):.2f} ({min(ra):.2f}–{max(ra):.2f}) | {statistics.median(rs):.2f} ({min(rs):.2f}–{max(rs):.2f}) |")
PY
