#!/usr/bin/env bash
# Skew, Nova-LSM's experiment (§8.2.5): YCSB Run A with ordered Zipfian (0.99) keys — the most
# popular keys the smallest and adjacent, so they start in one region — on NODES nodes in
# network namespaces (scripts/netns-cluster.sh: `tbf`-limited links), 2 copies of each region,
# the key space cut into NODES regions up front. Run twice on a fresh cluster each time: with
# splitting by load off (`--split-load-ops 0`) and on (`--split-load-ops SPLIT_OPS`, scaled to
# what the limited links carry). Each run: Load A, an adapting Run A (the cluster splits the hot
# region and its master moves the halves' primaries while it runs), then the measured Run A;
# with splitting on, a uniform Run A after. Prints the measured throughputs, on / off and skewed /
# uniform, and the time the cluster took to adapt (from the adapting run's start to the last
# change of its shape: regions, and which node leads each). The adapting runs repeat (up to
# ADAPT_RUNS, default 4, of ADAPT_OPS operations) until the shape held still for STILL_SECS
# (default 20). Writes answered OutcomeUnknown (their backups did not confirm them in time) are
# counted and reported, not retried.
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   sudo bash scripts/skew-bench.sh [NODES] [RATE] [RECORDS] [SPLIT_OPS]   # defaults 3, 16, 20000, 300
#   SKEW_WORKLOAD=run-w sudo bash scripts/skew-bench.sh ...   # the write-only mix instead of Run A
set -euo pipefail
nodes=${1:-3}; rate=${2:-16}; records=${3:-20000}; split_ops=${4:-300}
workload=${SKEW_WORKLOAD:-run-a}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
. "$here/scripts/netns-cluster.sh"
adapt_ops=${ADAPT_OPS:-40000}; measure_ops=${MEASURE_OPS:-40000}
bench() { # bench NAME WORKLOAD DIST OPS: its ops/s ("failed", with the bench's last lines on stderr)
  if ! $B bench --target halyard://10.77.1.2:7400 --password scaleout --records "$records" --ops "$4" \
    --threads 32 --workloads "$2" --mix L --dist "$3" --quiet --json "run-$1.json" > "run-$1.txt" 2>&1; then
    tail -3 "run-$1.txt" >&2; echo failed; return
  fi
  ops_of "run-$1.json" "$2"; }
# shape: the regions and the node leading each, one line ("" while the status cannot be read).
shape() { $B cluster status --etcd $E --json 2>/dev/null | python3 -c "
import json,sys; s=json.load(sys.stdin)
print(' '.join(f\"{r['start']}={r['primary']}\" for r in sorted(s['regions'], key=lambda r: r['start'])))" 2>/dev/null || true; }
settled() { for _ in $(seq 1 600); do
    $B cluster status --etcd $E --json | python3 -c "
import json,sys; s=json.load(sys.stdin)
ok = all(r['primary_alive'] and len(r['backups']) == 1 and not r['copying'] for r in s['regions']) and not s['log']
sys.exit(0 if ok else 1)" && return; sleep 0.5; done; echo "the cluster did not settle" >&2; exit 1; }
# last_change NAME SINCE SHAPE: "TIME SHAPE" of the last change in shape-NAME.txt away from
# SHAPE (SINCE and SHAPE when none).
last_change() {
  local last=$2 prev=$3 now rest
  while read -r now rest; do
    [ -n "$rest" ] && [ "$rest" != "$prev" ] && { last=$now; prev=$rest; }
  done < "shape-$1.txt"
  echo "$last $prev"; }
# cluster LOAD_OPS NAME: a fresh cluster, loaded, adapting and measured; sets skewed, uniform, took.
cluster() {
  netns_down; netns_up
  $B cluster init --etcd $E --regions "$nodes" --replicas 2 --bench-keys --no-merge >/dev/null
  # Copies at 1 MiB/s, half of a 16 Mbit/s link: a new backup's copy must leave room for clients.
  for i in $(seq 1 "$nodes"); do start "$i" --split-load-ops "$1" --move-rate-mb "${MOVE_RATE:-1}"; done
  settled
  $B bench --target halyard://10.77.1.2:7400 --password scaleout --records "$records" --ops 1 --threads 32 \
    --workloads load-a --mix L --quiet > "load-$2.txt" 2>&1 || { tail -5 "load-$2.txt"; exit 1; }
  local t0 last prev
  t0=$(date +%s.%N); last=$t0; prev=$(shape)
  ( while sleep 1; do echo "$(date +%s.%N) $(shape)"; done ) > "shape-$2.txt" &
  local poll=$!
  # Adapting runs until the shape held for STILL_SECS (at least one, at most ADAPT_RUNS): the
  # measured run starts on a cluster that adapted, not on one still moving copies.
  local n=0
  while :; do
    n=$((n + 1))
    bench "adapt-$2-$n" "$workload" zipfian-ordered "$adapt_ops" >/dev/null
    read -r last _ < <(last_change "$2" "$t0" "$prev")
    still=$(python3 -c "import time; print(int(time.time() - $last))")
    [ "$still" -ge "${STILL_SECS:-20}" ] || [ "$n" -ge "${ADAPT_RUNS:-4}" ] && break
  done
  skewed=$(bench "skewed-$2" "$workload" zipfian-ordered "$measure_ops")
  kill $poll
  $B cluster status --etcd $E > "run-status-$2.txt" 2>&1 || true
  read -r last prev < <(last_change "$2" "$t0" "$prev")
  took=$(python3 -c "print(f'{$last - $t0:.1f}')")
  regions=$(echo "$prev" | wc -w)
  uniform=-
  [ "$1" != 0 ] && uniform=$(bench "uniform-$2" "$workload" uniform "$measure_ops")
  local unknown=0 f
  for f in run-adapt-"$2"-*.json run-skewed-"$2".json; do [ -f "$f" ] && unknown=$((unknown + $(unknown_of "$f"))); done
  echo "skew ($nodes nodes, $rate Mbit/s links, $records records, split by load ${1/#0/off}): $workload ordered Zipfian $skewed ops/s, uniform $uniform ops/s; $regions regions at the end, last change $took s after the adapting run began; $unknown writes of unknown outcome; shape: $prev"
}
off=failed; on=failed
case "${SKEW_MODES:-off on}" in *off*) cluster 0 off; off=$skewed;; esac
case "${SKEW_MODES:-off on}" in *on*) cluster "$split_ops" on; on=$skewed;; esac
python3 -c "
on, off, uni = '$on', '$off', '$uniform'
if 'failed' not in (on, off, uni):
    print(f'skew ($nodes nodes): on / off {float(on) / float(off):.2f}, on skewed / uniform {float(on) / float(uni):.2f}, adapted in $took s')"
