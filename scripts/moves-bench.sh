#!/usr/bin/env bash
# Moving data in a cluster coordinated by etcd, on this machine's loopback:
#  1. copy: a region of about GIB GiB (one copy, YCSB Load A with L pairs of 1228 B) is moved
#     from n1 to n2 (`halyard admin move`, --move-rate-mb RATE) while YCSB Run A goes on. Prints
#     how long the capture held the region's writers, the copy's rate, the move's time against
#     1.2 x bytes / rate + 10 s, n1's RSS growth meanwhile, and Run A's throughput during the
#     move against a run just before it.
#  2. handoffs and restart: `cargo test --release --test etcd_moves` prints the write gaps of
#     planned handoffs (HANDOFFS of them) and of a SIGTERM leave.
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   bash scripts/moves-bench.sh [GIB] [RATE] [HANDOFFS]     # defaults 1, 64, 50
# STORAGE=remote: m1 and m2 keep their stores on three storage nodes (registered in etcd), and
# the move names segments rather than sending them; it prints what was sent and named.
# MIX=S|M|L|SD|...: the pairs' sizes (default L: 1228 B).
# Needs etcd (apt-get install etcd-server); uses ports 24791, 24801, 25411..29413 and 25611..25613.
set -euo pipefail
gib=${1:-1}; rate=${2:-64}; handoffs=${3:-50}
storage=${STORAGE:-local}; mix=${MIX:-L}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
source "$(dirname "$(realpath "$0")")/etcd-local.sh"
root=$(mktemp -d); cd "$root"
start_etcd 24791 24801
cleanup() {
  kill "$ETCD" 2>/dev/null || true
  pkill -f "halyard serve --dir m" 2>/dev/null || true
  pkill -f "halyard serve --role storage --dir s" 2>/dev/null || true
}
trap cleanup EXIT
$B cluster init --etcd $E --regions 1 --replicas 1 --bench-keys --no-balance >/dev/null
extra=()
if [ "$storage" = remote ]; then
  for i in 1 2 3; do
    RUST_LOG=warn $B serve --role storage --dir s$i --etcd $E --node stoc$i --listen 127.0.0.1:2561$i > s$i.log 2>&1 &
  done
  extra=(--storage remote)
  sleep 2
fi
start() {
  RUST_LOG=warn,halyard_replication::copy=info $B serve --dir m$1 --etcd $E --node m$1 \
    --listen 127.0.0.1:2541$1 --resp 127.0.0.1:2641$1 --http 127.0.0.1:2941$1 \
    --replication-listen 127.0.0.1:2841$1 --cache-mb 256 --move-rate-mb "$rate" "${extra[@]}" > m$1.log 2>&1 &
}
settled() {
  for _ in $(seq 1 300); do
    if $B cluster status --etcd $E --json | python3 -c "import json,sys; s=json.load(sys.stdin); sys.exit(0 if all(r['primary_alive'] for r in s['regions']) and not s['log'] else 1)"; then return; fi
    sleep 0.2
  done
}
ops() { python3 -c "
import json,sys
def walk(x):
    if isinstance(x, dict):
        if x.get('workload') == 'run-a' and 'ops_per_sec' in x: print(x['ops_per_sec']); sys.exit()
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(json.load(open('$1')))"; }
start 1; sleep 1; settled
records=$(python3 -c "print(int($gib * 2**30 / 1228))")
echo "loading $records pairs of 1228 B (about $gib GiB) into region 1 on m1 ..."
$B bench --target halyard://127.0.0.1:25411 --records $records --ops 1 --threads 8 --workloads load-a --mix $mix --quiet > load.txt 2>&1
start 2; sleep 2
run_ops=$((records / 4))
$B bench --target halyard://127.0.0.1:25411 --records $records --ops $run_ops --threads 8 --workloads run-a --mix $mix --quiet --json before.json > before.txt 2>&1
pid=$(pgrep -f "halyard serve --dir m1 ")
rss() { awk '/VmRSS/ {print $2}' /proc/$pid/status; }
rss0=$(rss)
# Short runs back to back for as long as the move lasts.
( i=0; while [ ! -e moved ]; do i=$((i + 1))
    $B bench --target halyard://127.0.0.1:25411 --records $records --ops $run_ops --threads 8 --workloads run-a --mix $mix --quiet --json during-$i.json > during-$i.txt 2>&1
  done ) &
BENCH=$!
sleep 1
t0=$(date +%s.%N)
( while [ ! -e moved ]; do rss; sleep 0.2; done ) > rss.txt &
$B admin move --region 1 --from m1 --to m2 --etcd $E > move.txt 2>&1
t1=$(date +%s.%N)
touch moved
wait $BENCH || true
bytes=$(grep 'copy started' m1.log | grep -o 'bytes=[0-9]*' | tail -1 | cut -d= -f2 || true)
paused=$(grep -o 'paused_us=[0-9]*' m1.log | tail -1 | cut -d= -f2 || true)
mibs=$(grep -o 'mib_s=[0-9.]*' m1.log | tail -1 | cut -d= -f2 || true)
rssmax=$(sort -n rss.txt | tail -1)
during=$(for f in during-*.json; do ops "$f"; done | awk '{ s += $1; n++ } END { if (n) print s / n; else print 0 }')
python3 - "$t0" "$t1" "${bytes:-0}" "$rate" "${paused:-0}" "${mibs:-0}" "$rss0" "${rssmax:-0}" "$(ops before.json)" "$during" <<'EOF'
import sys
t0, t1, b, rate, paused, mibs, rss0, rssmax, before, during = map(float, sys.argv[1:])
took = t1 - t0
bound = 1.2 * b / (rate * 2**20) + 10
print(f"copy: {b / 2**30:.2f} GiB at --move-rate-mb {rate:.0f}: writers paused {paused / 1000:.2f} ms at the capture; "
      f"sent at {mibs:.1f} MiB/s ({100 * mibs / rate:.0f}% of the rate); move took {took:.1f} s (bound {bound:.1f} s)")
print(f"copy: m1 RSS {rss0 / 1024:.0f} MiB before, {rssmax / 1024:.0f} MiB at most during (+{(rssmax - rss0) / 1024:.0f} MiB)")
print(f"copy: Run A {before:.0f} ops/s before, {during:.0f} ops/s during the move (mean of the runs it overlapped; {100 * during / max(before, 1):.0f}%)")
EOF
maxlat() { python3 -c "
import json,sys
def walk(x):
    if isinstance(x, dict):
        if x.get('workload') == 'run-a' and 'latency_us' in x: print(x['latency_us']['max']); sys.exit()
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(json.load(open('$1')))"; }
gap=$(for f in during-*.json; do maxlat "$f"; done | sort -n | tail -1)
echo "copy: longest Run A request during the move ${gap:-?} us (before it: $(maxlat before.json) us)"
grep 'copy sent' m1.log | tail -1 | python3 -c "
import re, sys
line = sys.stdin.read()
f = {k: float(v) for k, v in re.findall(r'\b(sent|logs|ssts|medium|named)=([0-9.]+)', line)}
if f:
    whole = f['sent'] + f['named']
    print(f\"copy: {whole / 2**20:.1f} MiB of segments: sent {f['sent'] / 2**20:.2f} MiB (log tails and cut logs {f['logs'] / 2**20:.2f}, \"
          f\"SSTs {f['ssts'] / 2**20:.2f}, medium {f['medium'] / 2**20:.2f}), named {f['named'] / 2**20:.1f} MiB; \"
          f\"sent beyond the log tails: {100 * (f['sent'] - f['logs']) / max(whole, 1):.2f}% of the region\")
"
pkill -f "halyard serve --dir m" 2>/dev/null || true
pkill -f "halyard serve --role storage --dir s" 2>/dev/null || true
sleep 1
cp m1.log m2.log "${TMPDIR:-/tmp}/" 2>/dev/null || true
cd "$here"
rm -rf "$root"
[ "$handoffs" = 0 ] && exit 0
HALYARD_HANDOFFS=$handoffs cargo test --release -q -p halyard --test etcd_moves -- --nocapture 2>&1 \
  | grep -E "handoffs under writes|left in|balanced onto" || true
