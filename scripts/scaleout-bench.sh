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
root=$(mktemp -d); cd "$root"
E=http://10.77.1.1:24794
cleanup() {
  pkill -f "halyard serve --dir s[0-9]" 2>/dev/null || true
  kill "${ETCD:-}" 2>/dev/null || true
  for i in 1 2 3 4 5; do ip netns del hy$i 2>/dev/null || true; ip link del hyv$i 2>/dev/null || true; done
  iptables -D FORWARD -s 10.77.0.0/16 -d 10.77.0.0/16 -j ACCEPT 2>/dev/null || true
  cp s*.log run-*.txt "${TMPDIR:-/tmp}/" 2>/dev/null || true
  cd "$here"; rm -rf "$root"
}
trap cleanup EXIT
sysctl -qw net.ipv4.ip_forward=1
iptables -I FORWARD -s 10.77.0.0/16 -d 10.77.0.0/16 -j ACCEPT
for i in 1 2 3 4 5; do
  ip netns add hy$i
  ip link add hyv$i type veth peer name eth0 netns hy$i
  ip addr add 10.77.$i.1/24 dev hyv$i; ip link set hyv$i up
  ip -n hy$i addr add 10.77.$i.2/24 dev eth0
  ip -n hy$i link set eth0 up; ip -n hy$i link set lo up
  ip -n hy$i route add default via 10.77.$i.1
  tc qdisc add dev hyv$i root tbf rate ${rate}mbit burst 64kb latency 100ms
  ip netns exec hy$i tc qdisc add dev eth0 root tbf rate ${rate}mbit burst 64kb latency 100ms
done
etcd --logger zap --log-level error --data-dir etcd --listen-client-urls http://0.0.0.0:24794 \
  --advertise-client-urls $E --listen-peer-urls http://127.0.0.1:24804 \
  --initial-advertise-peer-urls http://127.0.0.1:24804 --initial-cluster default=http://127.0.0.1:24804 \
  --experimental-enable-lease-checkpoint >/dev/null 2>&1 &
ETCD=$!
sleep 1.5
$B cluster init --etcd $E --regions 32 --replicas "$copies" --bench-keys >/dev/null
start() {
  local a=10.77.$1.2
  RUST_LOG=${HALYARD_LOG:-warn} ip netns exec hy$1 ${HALYARD_SERVE_BIN:-$B} serve --dir s$1 --etcd http://10.77.$1.1:24794 --node n$1 \
    --listen $a:7400 --resp $a:6400 --http $a:9400 --replication-listen $a:7500 --cache-mb 128 \
    --requirepass scaleout --cluster-secret scaleout-secret > s$1.log 2>&1 &
}
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
  python3 -c "
import json
def walk(x):
    if isinstance(x, dict):
        if x.get('workload') == 'run-a' and 'ops_per_sec' in x: print(round(x['ops_per_sec'])); raise SystemExit
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(json.load(open('run-$1.json')))"; }
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
