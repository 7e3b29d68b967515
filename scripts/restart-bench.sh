#!/usr/bin/env bash
# A planned restart of one node of a loaded 3-node cluster on etcd, on this machine's loopback:
# 8 regions, 2 copies, about GIB GiB of YCSB Load A (1228 B pairs). While YCSB Run A goes on
# (8 threads), n3 gets SIGTERM (it hands its primaries off and leaves), stays away AWAY seconds
# and starts again. Prints how long it took to leave, the longest request from SIGTERM until
# every group is whole (what a client saw of the restart) apart from the rest of the bench,
# the seconds that held a request of 100 ms or more, the cost of the return (full and
# incremental copies, bytes sent and bytes kept, against the bytes written to n3's regions while it was away), the primaries'
# largest RSS growth meanwhile, and the time until every group was whole again.
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   bash scripts/restart-bench.sh [GIB] [AWAY]     # defaults 0.5, 10
# SIGNAL=KILL: n3 is killed with SIGKILL instead (its regions fail over after the lease; on
# its return the copies of the regions it led are brought up to date like the others).
# LOG=filter sets the nodes' RUST_LOG; their logs end in ${TMPDIR:-/tmp}/r1.log .. r3.log.
# Needs etcd (apt-get install etcd-server); uses ports 24792, 24802 and 25421..29423.
set -euo pipefail
gib=${1:-0.5}; away=${2:-10}; signal=${SIGNAL:-TERM}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
source "$(dirname "$(realpath "$0")")/etcd-local.sh"
root=$(mktemp -d); cd "$root"
start_etcd 24792 24802
trap "kill \$ETCD 2>/dev/null; pkill -f \"halyard serve --dir r[0-9]\" 2>/dev/null; true" EXIT
$B cluster init --etcd $E --regions 8 --replicas 2 --bench-keys --no-merge >/dev/null
start() {
  RUST_LOG=${LOG:-warn,halyard_replication::copy=info} $B serve --dir r$1 --etcd $E --node n$1 \
    --listen 127.0.0.1:2542$1 --resp 127.0.0.1:2642$1 --http 127.0.0.1:2942$1 \
    --replication-listen 127.0.0.1:2842$1 --cache-mb 256 >> r$1.log 2>&1 &
}
status() { $B cluster status --etcd $E --json; }
whole() { status | python3 -c "
import json,sys; s=json.load(sys.stdin)
ok = all(r['primary_alive'] and len(r['backups']) == 1 and not r['copying'] and not r['away'] for r in s['regions'])
sys.exit(0 if ok and not s['log'] else 1)"; }
wait_whole() { for _ in $(seq 1 1500); do whole && return; sleep 0.2; done; echo "the cluster did not settle" >&2; exit 1; }
metric() { # sum of a counter over n1 and n2
  for n in 1 2; do curl -s 127.0.0.1:2942$n/metrics | awk -v m="$1" '$1 == m {print $2}'; done | awk '{s += $1} END {printf "%.0f\n", s}'; }
lsns() { status | python3 -c "
import json,sys; s=json.load(sys.stdin)
print(' '.join(f\"{r['id']}:{r['lsn'] or 0}\" for r in s['regions'] if r['primary'] == 'n3' or 'n3' in r['backups']))"; }
for n in 1 2 3; do start $n; done
wait_whole
records=$(python3 -c "print(int($gib * 2**30 / 1228))")
echo "loading $records pairs of 1228 B (about $gib GiB, 2 copies) ..."
l0=$(date +%s.%N)
$B bench --target halyard://127.0.0.1:25421 --records $records --ops 1 --threads 8 --workloads load-a --mix L --quiet > load.txt 2>&1
l1=$(date +%s.%N)
wait_whole
# Enough Run A for the whole restart: the load's rate for 10 s + AWAY + 60 s.
run_ops=$(python3 -c "print(int($records / ($l1 - $l0) * (70 + $away)))")
$B bench --target halyard://127.0.0.1:25421 --records $records --ops $run_ops --threads 8 --workloads run-a --mix L --quiet --json run.json > run.txt 2>&1 &
BENCH=$!
# The bench loads the records again before Run A (its run workloads always follow a load-a):
# the restart starts 10 s into Run A, the second load taken to last as long as the first.
sleep "$(python3 -c "print($l1 - $l0 + 10)")"
held=$(lsns)
c0=$(metric halyard_replication_catch_ups_total); i0=$(metric halyard_replication_incremental_catch_ups_total)
s0=$(metric halyard_replication_copy_bytes_total); k0=$(metric halyard_replication_copy_kept_bytes_total)
sh0=$(metric halyard_replication_shipped_bytes_total)
rss() { for n in 1 2; do awk '/VmRSS/ {print $2}' /proc/$(pgrep -f "halyard serve --dir r$n ")/status; done | sort -n | tail -1; }
rss0=$(rss)
pid=$(pgrep -f "halyard serve --dir r3 ")
t0=$(date +%s.%N)
kill -"$signal" "$pid"
while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
t1=$(date +%s.%N)
sleep "$away"
before=$(lsns)
start 3
t2=$(date +%s.%N); since=$(date -u +%Y-%m-%dT%H:%M:%S)
( while [ ! -e whole ]; do rss; sleep 0.2; done ) > rss.txt &
wait_whole
t3=$(date +%s.%N)
touch whole
after=$(lsns)
# The copies n3 was sent on its return (its primaries' logs), apart from any other move.
to_n3=$(cat r1.log r2.log | grep 'copy sent' | grep 'backup=n3' | python3 -c "
import re,sys
f=i=s=k=0
for l in sys.stdin:
    if l[:19] < '$since': continue
    s += int(re.search(r'sent=(\d+)', l).group(1)); k += int(re.search(r'kept=(\d+)', l).group(1))
    if 'kind=\"full\"' in l: f += 1
    else: i += 1
print(f, i, s, k)")
c1=$(metric halyard_replication_catch_ups_total); i1=$(metric halyard_replication_incremental_catch_ups_total)
s1=$(metric halyard_replication_copy_bytes_total); k1=$(metric halyard_replication_copy_kept_bytes_total)
sh1=$(metric halyard_replication_shipped_bytes_total)
rssmax=$(sort -n rss.txt | tail -1)
wait $BENCH || echo "restart: the bench stopped early: $(tail -n 1 run.txt)"
python3 - "$t0" "$t1" "$t2" "$t3" "$held" "$before" "$after" "$c0 $c1 $i0 $i1 $s0 $s1 $k0 $k1 $sh0 $sh1" "$rss0" "${rssmax:-0}" "$to_n3" "$signal" <<'EOF'
import sys
t0, t1, t2, t3 = map(float, sys.argv[1:5])
lsn = lambda a: dict(tuple(map(int, x.split(':'))) for x in a.split())
held, after = lsn(sys.argv[5]), lsn(sys.argv[7])
c0, c1, i0, i1, s0, s1, k0, k1, sh0, sh1 = map(float, sys.argv[8].split())
rss0, rssmax = float(sys.argv[9]), float(sys.argv[10])
# Regions n3 no longer holds when whole (the balancer moved them off) are left out.
both = [r for r in held if r in after]
missed = sum(after[r] - held[r] for r in both)
sent, kept = s1 - s0, k1 - k0
print(f"restart: n3 left {1000 * (t1 - t0):.0f} ms after SIG{sys.argv[12]}, was away {t2 - t1:.1f} s; every group whole {t3 - t2:.1f} s after it started again")
nf, ni, ns, nk = map(int, sys.argv[11].split())
print(f"restart: n3 was sent {nf} full and {ni} incremental copies: {ns / 2**20:.1f} MiB sent, {nk / 2**20:.1f} MiB kept")
print(f"restart: all copies in the cluster meanwhile (any moves the balancer made too): {int(c1 - c0)} full, {int(i1 - i0)} incremental, "
      f"{sent / 2**20:.1f} MiB sent, {kept / 2**20:.1f} MiB kept")
print(f"restart: {missed} records written to n3's {len(both)} regions (of {len(held)}; the others moved off n3) from SIGTERM to whole (about {missed * 1300 / 2**20:.1f} MiB at 1,300 B a record); "
      f"target: n3's copies sent <= that + 64 MiB")
# What a backup that stayed would have been sent meanwhile (Send-Index ships compaction output
# too): the live stream of the regions n3 did not hold, per region, times n3's regions.
other = 8 - len(held)
if other:
    print(f"restart: a backup that stayed would have been shipped about {(sh1 - sh0) / other * len(held) / 2**20:.1f} MiB over the same time "
          f"(the {other} other regions' stream, {(sh1 - sh0) / 2**20:.1f} MiB, per region, times {len(held)})")
print(f"restart: the primaries' RSS {rss0 / 1024:.0f} MiB before, {rssmax / 1024:.0f} MiB at most during the return (+{(rssmax - rss0) / 1024:.0f} MiB)")
EOF
python3 - "$t0" "$t3" <<'EOF'
import json, sys
t0, t3 = map(float, sys.argv[1:3])
phases = []
def walk(x):
    if isinstance(x, dict):
        if 'latency_us' in x and 'max_latency_ms_series' in x:
            phases.append(x)
        for v in x.values(): walk(v)
    elif isinstance(x, list):
        for v in x: walk(v)
walk(json.load(open('run.json')))
# Second i of a phase's series holds the requests that ended i..i+1 s after the phase began;
# one ending from a second before SIGTERM to a second after whole is the restart's.
inside, outside, slow, hit = 0.0, 0.0, [], set()
for x in phases:
    start = x['started_unix_ms'] / 1000
    for i, ms in enumerate(x['max_latency_ms_series']):
        if t0 - 1 <= start + i <= t3 + 1:
            inside = max(inside, ms)
            hit.add(x['workload'])
        else:
            outside = max(outside, ms)
        if ms >= 100:
            slow.append(f"{start + i - t0:+.0f}s:{ms:.0f}")
for x in phases:
    if x['workload'] == 'run-a':
        l = x['latency_us']
        print(f"restart: Run A: {x.get('ops_per_sec', 0):.0f} ops/s, latency p50 {l['p50']} us, p99 {l['p99']} us, max {l['max'] / 1000:.0f} ms")
print(f"restart: longest request from SIGTERM to whole {inside:.0f} ms (during {', '.join(sorted(hit)) or 'no phase'}); "
      f"over the rest of the bench {outside:.0f} ms")
print(f"restart: seconds holding a request of 100 ms or more (seconds from SIGTERM:ms): {' '.join(slow) or 'none'}")
EOF
cp r1.log r2.log r3.log "${TMPDIR:-/tmp}/" 2>/dev/null || true
cd "$here"
rm -rf "$root"
