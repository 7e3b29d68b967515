#!/usr/bin/env bash
# Storage nodes (Nova-LSM §4.4, §8.2): one processing node on this host runs its store on
# storage nodes in network namespaces (scripts/netns-cluster.sh: each link `tbf`-limited to RATE
# Mbit/s each way), each segment striped over 2 data fragments and a parity fragment.
# 1. Power-of-d against random placement, node 5's link throttled to a quarter of the others':
#    a write-only load (YCSB Load A) with each placement, RUNS times, alternating.
# 2. The same load on 3 and 5 storage nodes (unthrottled), on the local device, and on 3
#    storage nodes on loopback (the network path's cost on one machine): throughput, and bytes
#    over the links per user byte.
# Prints a table of ops/s (medians) and link bytes. Processing nodes run --remote-log lazy: the
# log goes out in chunks, so what differs is placement; scripts/remote-log-bench.sh measures
# what acknowledging only pushed log records costs.
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   sudo bash scripts/storage-bench.sh [RATE] [RECORDS] [RUNS]   # defaults 40, 40000, 3
set -euo pipefail
rate=${1:-40}; records=${2:-40000}; runs=${3:-3}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
. "$here/scripts/netns-cluster.sh"
throttle() { # throttle I MBIT: node I's link, both ways
  tc qdisc change dev hyv$1 root tbf rate ${2}mbit burst 64kb latency 100ms
  ip netns exec hy$1 tc qdisc change dev eth0 root tbf rate ${2}mbit burst 64kb latency 100ms; }
stocs() { # stocs N: storage nodes in hy1..hyN; prints their addresses, comma-separated
  local list=""
  for i in $(seq 1 "$1"); do
    rm -rf f$i
    ( RUST_LOG=warn ip netns exec hy$i "$B" serve --role storage --dir f$i --listen 10.77.$i.2:7600 \
      --cluster-secret bench > f$i.log 2>&1 & )
    list="$list${list:+,}10.77.$i.2:7600"
  done
  for i in $(seq 1 "$1"); do
    for _ in $(seq 1 100); do (echo > /dev/tcp/10.77.$i.2/7600) 2>/dev/null && break; sleep 0.1; done
  done
  echo "$list"; }
link_bytes() { # bytes sent and received over every namespace link so far
  local t=0 i
  for i in 1 2 3 4 5; do
    t=$((t + $(cat /sys/class/net/hyv$i/statistics/tx_bytes) + $(cat /sys/class/net/hyv$i/statistics/rx_bytes)))
  done
  echo $t; }
# load NAME FLAGS...: a fresh processing node with FLAGS, Load A through it; prints "OPS BYTES".
load() {
  local name=$1; shift
  rm -rf p-$name
  RUST_LOG=info "$B" serve --dir p-$name --node p1 --cluster-secret bench --resp 127.0.0.1:26400 \
    --listen 127.0.0.1:27400 --http 127.0.0.1:29400 --cache-mb 64 --remote-log lazy "$@" > p-$name.log 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do (echo > /dev/tcp/127.0.0.1/26400) 2>/dev/null && break; sleep 0.1; done
  local b0; b0=$(link_bytes)
  "$B" bench --target resp://127.0.0.1:26400 --records "$records" --ops 1 --threads 16 --workloads load-a \
    --mix L --quiet --json run-$name.json > run-$name.txt 2>&1 || { tail -3 run-$name.txt >&2; }
  local b1; b1=$(link_bytes)
  kill $pid; wait $pid 2>/dev/null || true
  cp p-$name.log "${TMPDIR:-/tmp}/" 2>/dev/null || true
  echo "$(ops_of run-$name.json load-a) $((b1 - b0))"; }
median() { python3 -c "import statistics,sys; print(round(statistics.median(float(x) for x in sys.argv[1:])))" "$@"; }
user_bytes=$((records * 1228))

netns_down; netns_up
list=$(stocs 5)
throttle 5 $((rate / 4))
pd=(); rnd=()
for r in $(seq 1 "$runs"); do
  for f in f1 f2 f3 f4 f5; do rm -rf "$f/p1"; done
  read -r o _ < <(load pd$r --storage remote --storage-nodes "$list" --stripe-width 2 --stripe-placement power-of-d)
  pd+=("$o")
  for f in f1 f2 f3 f4 f5; do rm -rf "$f/p1"; done
  read -r o _ < <(load rnd$r --storage remote --storage-nodes "$list" --stripe-width 2 --stripe-placement random)
  rnd+=("$o")
done
echo "power-of-d vs random, node 5 at $((rate / 4)) of $rate Mbit/s, Load A (L mix, $records records), $runs runs each"
echo "  power-of-d ops/s: ${pd[*]} (median $(median "${pd[@]}"))"
echo "  random     ops/s: ${rnd[*]} (median $(median "${rnd[@]}"))"
python3 -c "print(f'  ratio power-of-d / random: {$(median "${pd[@]}") / $(median "${rnd[@]}"):.2f}')"
throttle 5 "$rate"
pkill -9 -f "serve --role storage --dir f" || true
sleep 0.5
echo "storage nodes (unthrottled, $rate Mbit/s links), Load A (L mix, $records records; user bytes $user_bytes):"
for n in 3 5; do
  list=$(stocs "$n")
  read -r o b < <(load n$n --storage remote --storage-nodes "$list" --stripe-width 2)
  python3 -c "print(f'  $n storage nodes: $o ops/s, link bytes {$b / 1e6:.1f} MB = {$b / $user_bytes:.2f} per user byte')"
  pkill -9 -f "serve --role storage --dir f" || true
  sleep 0.5
done
read -r o _ < <(load local)
echo "  local device: $o ops/s"
# The network path's cost on one machine: storage nodes on loopback, no link limits.
list=""
for i in 1 2 3; do
  rm -rf g$i
  ( RUST_LOG=warn "$B" serve --role storage --dir g$i --listen 127.0.0.1:2760$i --cluster-secret bench > g$i.log 2>&1 & )
  list="$list${list:+,}127.0.0.1:2760$i"
done
sleep 1
read -r o _ < <(load loop --storage remote --storage-nodes "$list" --stripe-width 2)
echo "  3 storage nodes on loopback (no link limit): $o ops/s"
pkill -9 -f "serve --role storage --dir g" || true
