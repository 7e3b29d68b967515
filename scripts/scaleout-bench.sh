#!/usr/bin/env bash
# Scale-out on etcd: nodes in network namespaces joined to this host by veth pairs, each link
# limited by `tbf` to RATE Mbit/s each way, so that on a machine of two cores the curve shows
# what adding machines does, not how the processes share the cores. A cluster of 32 regions
# (COPIES copies) starts on COPIES nodes (one, or two); YCSB Load A then Run A (1228 B pairs,
# 32 client threads on the host, the region-aware native client); then nodes join up to three
# and the master balances, Run A again; then up to five. Prints Run A's throughput at each size,
# its ratio to the first, and how long each balance took (from the join to a quiet, even cluster).
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   sudo bash scripts/scaleout-bench.sh [COPIES] [RATE] [RECORDS]     # defaults 1, 16, 100000
# Needs root (ip netns, tc, iptables), etcd; uses 10.77.1.0/24 .. 10.77.5.0/24 and port 24794.
set -euo pipefail
copies=${1:-1}; rate=${2:-16}; records=${3:-100000}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
. "$here/scripts/netns-cluster.sh"
netns_up
$B cluster init --etcd $E --regions 32 --replicas "$copies" --bench-keys --no-merge >/dev/null
# Quiet and even: every region led and with its copies, nothing moving, and the nodes' copies and
# primaries within one of each other, for 3 s in a row.
even() { $B cluster status --etcd $E --json | python3 -c "
import json,sys; s=json.load(sys.stdin)
live=[n for n in s['nodes'] if n['alive']]
c=[n['primaries']+n['backups'] for n in live]; p=[n['primaries'] for n in live]
ok = all(r['primary_alive'] and len(r['backups']) == min($copies, $1) - 1 and not r['copying'] for r in s['regions'])
ok = ok and not s['log'] and not s['requests'] and max(c) - min(c) <= 1 and max(p) - min(p) <= 1 and len(live) == $1
sys.exit(0 if ok else 1)"; }
# balanced NODES: waits for that, prints when the quiet stretch began.
balanced() { local quiet=0 since=0; for _ in $(seq 1 3000); do
    if even "$1"; then
      [ $quiet = 0 ] && since=$(date +%s.%N)
      quiet=$((quiet + 1)); [ $quiet -ge 15 ] && { echo "$since"; return; }
    else quiet=0; fi
    sleep 0.2; done
  echo "no balance with $1 nodes" >&2; exit 1; }
run() { # run NODES: Run A, its ops/s ("failed", with the bench's last lines on stderr, if it failed)
  if ! $B bench --target halyard://10.77.1.2:7400 --password scaleout --records $records --ops $((20000 * $1)) \
    --threads 32 --workloads run-a --mix L --quiet --json run-$1.json > run-$1.txt 2>&1; then
    tail -3 run-$1.txt >&2; echo failed; return
  fi
  ops_of run-$1.json run-a; }
first=$copies
for i in $(seq 1 "$first"); do start "$i"; done
balanced "$first" >/dev/null
$B bench --target halyard://10.77.1.2:7400 --password scaleout --records $records --ops 1 --threads 32 --workloads load-a --mix L --quiet > load.txt 2>&1 || { tail -5 load.txt; exit 1; }
one=$(run "$first")
echo "scale-out ($copies copies, $rate Mbit/s links, $records records): $first node(s): Run A $one ops/s"
prev=$first
for n in 3 5; do
  t0=$(date +%s.%N)
  for i in $(seq $((prev + 1)) "$n"); do start "$i"; done
  prev=$n
  since=$(balanced $n)
  took=$(python3 -c "print(f'{$since - $t0:.1f}')")
  ops=$(run $n)
  ratio=-; [ "$ops" != failed ] && [ "$one" != failed ] && ratio=$(python3 -c "print(f'{$ops / $one:.2f}')")
  echo "scale-out ($copies copies): $n nodes: balanced $took s after the join; Run A $ops ops/s, $ratio x $first node(s)"
done
