#!/usr/bin/env bash
# Side-by-side redis-benchmark runs against `halyard serve` and `redis-server`.
# Usage: scripts/redis-compare.sh [RUNS]   (default 6; needs redis-server and redis-benchmark)
#   TESTS=lpush,lpop,rpush,rpop,sadd,spop,zadd,zpopmin,lrange_100 scripts/redis-compare.sh 3
#   chooses redis-benchmark's tests (-t; default set,get); N sets requests per test.
# Each run starts both servers fresh (Halyard with its defaults, Redis with AOF every second),
# runs the same redis-benchmark command against one and then the other, and prints per-run
# requests/s, ratios, and the medians of the per-run ratios.
set -euo pipefail
RUNS=${1:-6}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HALYARD_BIN:-$ROOT/target/release/halyard}
[ -x "$BIN" ] || cargo build --release -p halyard --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d)
HPORT=${HPORT:-16400}; RPORT=${RPORT:-16401}
TESTS=${TESTS:-set,get}
CMD=(-t "$TESTS" -n "${N:-1000000}" -P 16 -c 50 -r 1000000 -q)
cleanup() { pkill -f "halyard serve --dir $WORK" 2>/dev/null || true; redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return; sleep 0.1; done; echo "port $1 never answered" >&2; exit 1; }
# "NAME=rate" per test (the test's name as redis-benchmark prints it, spaces dropped).
rates() {
  redis-benchmark -p "$1" "${CMD[@]}" 2>/dev/null | tr '\r' '\n' | grep "requests per second" |
    sed -E 's/^([^:]+): ([0-9.]+) requests per second.*/\1=\2/' | tr -d ' ' | tr '\n' ' '
}
OUT=$WORK/results.txt
for i in $(seq 1 "$RUNS"); do
  rm -rf "$WORK/data" "$WORK/redis"; mkdir -p "$WORK/redis"
  "$BIN" serve --dir "$WORK/data" --resp 127.0.0.1:$HPORT --listen 127.0.0.1:$((HPORT + 10)) \
    --http 127.0.0.1:$((HPORT + 20)) >"$WORK/halyard.log" 2>&1 &
  HPID=$!
  (cd "$WORK/redis" && exec redis-server --port "$RPORT" --save "" --appendonly yes --appendfsync everysec >/dev/null 2>&1) &
  wait_port "$HPORT"; wait_port "$RPORT"
  H=$(rates "$HPORT"); R=$(rates "$RPORT")
  kill -INT "$HPID"; wait "$HPID" || true
  redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1 || true; wait || true
  echo "$i|$H|$R" | tee -a "$OUT"
done
python3 - "$OUT" <<'PY'
import statistics, sys
runs = []
for line in open(sys.argv[1]):
    _, h, r = line.rstrip("\n").split("|")
    parse = lambda s: dict(kv.split("=") for kv in s.split())
    runs.append((parse(h), parse(r)))
for name in runs[0][0]:
    hs = [float(h[name]) for h, r in runs if name in h and name in r]
    rs = [float(r[name]) for h, r in runs if name in h and name in r]
    ratios = [a / b for a, b in zip(hs, rs)]
    print(f"{name}: halyard median {statistics.median(hs):,.0f} req/s, redis median {statistics.median(rs):,.0f} req/s, "
          f"per-run ratios {[round(x, 2) for x in ratios]}, median ratio {statistics.median(ratios):.2f}")
PY
