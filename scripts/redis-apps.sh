#!/usr/bin/env bash
# Three Python applications that run on Redis, tried against `halyard serve` as a new user
# would: a rate limiter (limits: fixed window, moving window, sliding window counter — its
# strategies are Lua scripts), a task queue (Celery with the Redis broker and result backend:
# lists, blocking pops, MULTI pipelines with EVALSHA, pub/sub) and a job queue (RQ).
# Usage: scripts/redis-apps.sh   (HALYARD=path, default target/release/halyard, built if absent;
#   installs the three packages into a virtualenv under $TMPDIR from PyPI)
# Prints one line per application: ok, or what failed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${HALYARD:-$ROOT/target/release/halyard}
[ -x "$BIN" ] || cargo build --release -p halyard --manifest-path "$ROOT/Cargo.toml"
WORK=$(mktemp -d)
PORT=${PORT:-16500}
cleanup() { pkill -f "halyard serve --dir $WORK" 2>/dev/null; pkill -f "celery -A apptasks" 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
python3 -m venv "$WORK/venv" && "$WORK/venv/bin/pip" install -q limits celery rq redis || {
  echo "could not install the packages (PyPI unreachable?)"; exit 1; }
PY=$WORK/venv/bin/python
"$BIN" serve --dir "$WORK/data" --resp 127.0.0.1:$PORT --listen 127.0.0.1:$((PORT + 1)) \
  --http 127.0.0.1:$((PORT + 2)) >"$WORK/halyard.log" 2>&1 &
for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
URL=redis://127.0.0.1:$PORT

echo -n "limits: "
timeout 60 "$PY" - "$URL" <<'PY' 2>&1 | tail -1
import sys
from limits import storage, strategies, parse
s = storage.storage_from_string(sys.argv[1])
for strat in (strategies.FixedWindowRateLimiter, strategies.MovingWindowRateLimiter,
              strategies.SlidingWindowCounterRateLimiter):
    got = [strat(s).hit(parse("3/minute"), "user", strat.__name__) for _ in range(5)]
    assert got == [True, True, True, False, False], (strat.__name__, got)
print("ok (fixed window, moving window, sliding window counter: 3 of 5 hits allowed)")
PY

echo -n "celery: "
cat > "$WORK/apptasks.py" <<EOF2
from celery import Celery
app = Celery('apptasks', broker='$URL/0', backend='$URL/1')
@app.task
def add(x, y):
    return x + y
EOF2
(cd "$WORK" && timeout 90 "$WORK/venv/bin/celery" -A apptasks worker --pool=solo -c 1 --loglevel=warning \
  >"$WORK/celery.log" 2>&1 &)
(cd "$WORK" && timeout 60 "$PY" - <<'PY' 2>&1 | tail -1)
from apptasks import add
results = [add.delay(i, i) for i in range(20)]
assert [r.get(timeout=30) for r in results] == [2 * i for i in range(20)]
print("ok (20 tasks through the broker, results from the backend)")
PY

echo -n "rq: "
cat > "$WORK/appjobs.py" <<'EOF2'
def add(a, b):
    return a + b
EOF2
(cd "$WORK" && timeout 60 "$PY" - "$PORT" <<'PY' 2>&1 | tail -1)
import sys, redis, rq
import appjobs
r = redis.Redis(port=int(sys.argv[1]))
q = rq.Queue('default', connection=r)
jobs = [q.enqueue(appjobs.add, i, i) for i in range(5)]
rq.SimpleWorker([q], connection=r).work(burst=True)
assert [j.return_value() for j in jobs] == [2 * i for i in range(5)]
print("ok (5 jobs enqueued, worked, results read)")
PY
