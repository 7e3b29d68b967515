#!/usr/bin/env bash
# Merges of small idle regions: a cluster of REGIONS regions (`cluster init --regions`, cut over
# halyard bench's keys; 3 nodes on this machine's loopback, 2 copies, --region-max-mb MAX so
# that a region holding MiB of data is not small) takes MIB MiB from YCSB Load A with the master's
# merges off; `halyard delrange` then empties every region, merges are turned on
# (`halyard cluster config --merge true`), and the script prints how many regions remain every
# 10 s and the time until at most TARGET remain (giving up after 300 s).
#   cargo build --release -p halyard          # or HALYARD_BIN=path/to/halyard
#   bash scripts/merge-bench.sh [REGIONS] [MIB] [MAX] [TARGET]    # defaults 100, 300, 128, 10
# Needs etcd (apt-get install etcd-server); uses ports 24793, 24803 and 25431..29433.
set -euo pipefail
regions=${1:-100}; mib=${2:-300}; max=${3:-128}; target=${4:-10}
here=$(cd "$(dirname "$0")/.." && pwd)
B=${HALYARD_BIN:-"$here/target/release/halyard"}
source "$(dirname "$(realpath "$0")")/etcd-local.sh"
root=$(mktemp -d); cd "$root"
start_etcd 24793 24803
trap "pkill -9 -f \"serve --dir m[0-9] --etcd $E\" 2>/dev/null; kill \$ETCD 2>/dev/null; cp m*.log load.txt \${TMPDIR:-/tmp}/ 2>/dev/null; cd /; [ -n \"\${KEEP:-}\" ] || rm -rf $root" EXIT
$B cluster init --etcd $E --replicas 2 --regions "$regions" --bench-keys --no-merge >/dev/null
for i in 1 2 3; do
  ( RUST_LOG=${HALYARD_LOG:-warn} $B serve --dir m$i --etcd $E --node m$i --listen 127.0.0.1:2543$i --resp 127.0.0.1:2643$i \
    --http 127.0.0.1:2943$i --replication-listen 127.0.0.1:2843$i --cache-mb 128 --region-max-mb "$max" > m$i.log 2>&1 & )
done
# "regions led" of the status: the regions in the map, and whether each has a live primary.
count() { $B cluster status --etcd $E --json | python3 -c "
import json,sys; s=json.load(sys.stdin); r=s['regions']
print(len(r), 1 if all(x['primary_alive'] for x in r) and not s['log'] else 0)"; }
for _ in $(seq 1 600); do [ "$(count | cut -d' ' -f2)" = 1 ] && break; sleep 0.2; done
records=$((mib * 1024 * 1024 / 1228))
$B bench --target halyard://127.0.0.1:25431 --records "$records" --ops 1 --threads 8 --workloads load-a --mix L \
  --quiet > load.txt 2>&1 || { tail -5 load.txt; exit 1; }
addrs=127.0.0.1:25431,127.0.0.1:25432,127.0.0.1:25433
$B delrange user v --addr "$addrs"
read -r n _ < <(count)
echo "merge: $mib MiB loaded into $n regions and deleted (one range delete); merges on"
$B cluster config --etcd $E --merge true >/dev/null
t0=$(date +%s.%N)
for i in $(seq 1 300); do
  read -r n settled < <(count)
  if [ "$n" -le "$target" ] && [ "$settled" = 1 ]; then
    echo "merge: $n regions (at most $target) $(python3 -c "print(f'{$(date +%s.%N) - $t0:.0f}')") s after merges were turned on"
    exit 0
  fi
  [ $((i % 10)) = 0 ] && echo "  $i s: $n regions"
  sleep 1
done
echo "merge: still $n regions 300 s after merges were turned on"
exit 1
