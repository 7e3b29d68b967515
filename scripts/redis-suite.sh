#!/usr/bin/env bash
# Runs units of Redis 7.0's own Tcl test suite against `halyard serve` and, side by side, against a
# fresh `redis-server`, both in the suite's external-server mode (--host/--port), and tabulates
# passed / failed / skipped tests per unit and whether a unit ended early on an exception.
#
# Usage: scripts/redis-suite.sh [options] REDIS_SOURCE [UNIT...]
#   REDIS_SOURCE  a Redis source tree (holding tests/test_helper.tcl) or a git mirror of Redis (bare
#                 or not); from a mirror the newest 7.0.* tag's tests/ is taken (REDIS_REF=tag to
#                 choose). Nothing is downloaded.
#   UNIT          units to run (default: type/string type/incr type/hash type/list type/set
#                 type/zset expire keyspace multi scan protocol scripting pubsub)
# Options:
#   --json FILE      also write the figures as JSON
#   --out DIR        where the raw logs go (default: a new directory under ${TMPDIR:-/tmp})
#   --timeout SECS   hard limit per unit and server (default 300); the runner's own no-progress
#                    limit is RUNNER_TIMEOUT (default 120)
#   --durable        pass the suite's own --durable: an error raised inside a test counts as that
#                    test's failure instead of ending the unit (diagnostic; not how Redis runs it)
#   --harness-shim   in the scratch copy of tests/, wrap the external-mode set-up commands that
#                    every start_server sends (FUNCTION FLUSH, CONFIG SET of the overrides and their
#                    restoring) in `catch`, so that a server lacking them still runs the tests
#                    (diagnostic; it edits the suite, and the JSON and table say so)
# Environment: HALYARD (default target/release/halyard, built if absent), REDIS_SERVER (default
#   redis-server), TCLSH (default tclsh), TAGS (default: -slow and every needs:* tag the 7.0 suite
#   defines that an external server cannot honour).
#
# The same runner flags go to both servers: --singledb is not used (Halyard has SELECT),
# --ignore-encoding and --ignore-digest are (Halyard has no OBJECT ENCODING or DEBUG DIGEST; they
# only weaken assertions, on both servers alike). Per unit: passed = [ok] lines, failed = [err]
# lines, skipped = [skip] + [ignore] lines, exception = the unit ended on [exception], a runner
# [TIMEOUT] or the hard timeout; "not run" = redis-server's count of tests in the unit minus
# Halyard's passed + failed + skipped when Halyard's unit ended early. The run is a measurement:
# the exit status is 0 once every unit ran, whatever the tests did; non-zero only when the script
# could not run (missing tools, a server that would not start, bad arguments).
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
die() { echo "redis-suite: $*" >&2; exit 2; }

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DEFAULT_UNITS=(type/string type/incr type/hash type/list type/set type/zset expire keyspace multi
  scan protocol scripting pubsub)
JSON="" OUT="" UNIT_TIMEOUT=300 DURABLE=0 SHIM=0 SRC="" UNITS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --json) JSON=${2:?--json needs a file}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --timeout) UNIT_TIMEOUT=${2:?--timeout needs seconds}; shift 2 ;;
    --durable) DURABLE=1; shift ;;
    --harness-shim) SHIM=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) if [ -z "$SRC" ]; then SRC=$1; else UNITS+=("${1#unit/}"); fi; shift ;;
  esac
done
[ -n "$SRC" ] || { usage >&2; exit 2; }
[ ${#UNITS[@]} -gt 0 ] || UNITS=("${DEFAULT_UNITS[@]}")
RUNNER_TIMEOUT=${RUNNER_TIMEOUT:-120}
TAGS=${TAGS:-"-slow -needs:debug -needs:repl -needs:config-maxmemory -needs:config-resetstat -needs:latency -needs:local-process -needs:pfdebug -needs:reset -needs:save"}

# --- tools ---------------------------------------------------------------------------------------
TCLSH=${TCLSH:-tclsh}
if ! command -v "$TCLSH" >/dev/null; then
  if command -v apt-get >/dev/null; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get install -y tcl >&2 || die "tclsh is missing and apt-get install tcl failed"
  fi
  command -v "$TCLSH" >/dev/null || die "tclsh is missing"
fi
REDIS_SERVER=${REDIS_SERVER:-redis-server}
command -v "$REDIS_SERVER" >/dev/null || die "$REDIS_SERVER not found"
command -v redis-cli >/dev/null || die "redis-cli not found"
command -v python3 >/dev/null || die "python3 not found"
HALYARD=${HALYARD:-$ROOT/target/release/halyard}
if [ ! -x "$HALYARD" ]; then
  cargo build --release -p halyard --manifest-path "$ROOT/Cargo.toml" >&2
fi
[ -x "$HALYARD" ] || die "no Halyard binary at $HALYARD"
HALYARD=$(cd "$(dirname "$HALYARD")" && pwd)/$(basename "$HALYARD")

# --- output directory and a scratch copy of the suite ---------------------------------------------
if [ -z "$OUT" ]; then OUT=$(mktemp -d "${TMPDIR:-/tmp}/redis-suite.XXXXXX"); fi
mkdir -p "$OUT/logs"
OUT=$(cd "$OUT" && pwd)
SUITE=$OUT/suite
rm -rf "$SUITE"; mkdir -p "$SUITE"
if [ -f "$SRC/tests/test_helper.tcl" ]; then
  cp -r "$SRC/tests" "$SUITE/"
  REDIS_REF=$( (git -C "$SRC" describe --tags 2>/dev/null || echo "source tree $SRC") | head -1)
else
  GIT_DIR_ARG=$SRC
  [ -d "$SRC/.git" ] && GIT_DIR_ARG=$SRC/.git
  git --git-dir="$GIT_DIR_ARG" rev-parse --git-dir >/dev/null 2>&1 || die "$SRC is neither a Redis source tree nor a git mirror"
  if [ -z "${REDIS_REF:-}" ]; then
    REDIS_REF=$(git --git-dir="$GIT_DIR_ARG" tag -l '7.0.*' | grep -E '^7\.0\.[0-9]+$' | sort -V | tail -1)
    [ -n "$REDIS_REF" ] || die "no 7.0.* tag in $SRC"
  fi
  git --git-dir="$GIT_DIR_ARG" archive "$REDIS_REF" tests | tar -x -C "$SUITE" || die "cannot extract tests/ of $REDIS_REF"
fi
[ -f "$SUITE/tests/test_helper.tcl" ] || die "no tests/test_helper.tcl in $SRC"
mkdir -p "$SUITE/tests/tmp"
if [ "$SHIM" = 1 ]; then
  python3 - "$SUITE/tests/support/server.tcl" <<'PY' || die "--harness-shim: tests/support/server.tcl is not as expected"
import sys
p = sys.argv[1]; s = open(p).read()
edits = [("    r function flush\n", "    catch {r function flush}\n"),
         ("        r config set $param $val\n", "        catch {r config set $param $val}\n"),
         ("    dict for {param val} $saved_config {\n        r config set $param $val\n",
          "    dict for {param val} $saved_config {\n        catch {r config set $param $val}\n")]
for old, new in edits:
    if old not in s: sys.exit(1)
    s = s.replace(old, new, 1)
open(p, "w").write(s)
PY
fi

# --- servers --------------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
SERVER_PID=""
stop_server() {
  [ -n "$SERVER_PID" ] || return 0
  if kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -INT "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
trap stop_server EXIT
wait_port() {
  for _ in $(seq 300); do
    [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && return 0
    kill -0 "$SERVER_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}
# start_server KIND UNIT_SLUG: starts a fresh server with a fresh directory, sets PORT and SERVER_PID
start_server() {
  local kind=$1 slug=$2 dir
  dir=$OUT/data/$kind-$slug; rm -rf "$dir"; mkdir -p "$dir"
  PORT=$(free_port)
  if [ "$kind" = halyard ]; then
    local p2 p3; p2=$(free_port); p3=$(free_port)
    "$HALYARD" serve --dir "$dir" --resp "127.0.0.1:$PORT" --listen "127.0.0.1:$p2" \
      --http "127.0.0.1:$p3" >"$OUT/logs/$slug.halyard-server.log" 2>&1 &
  else
    (cd "$dir" && exec "$REDIS_SERVER" --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$dir" >"$OUT/logs/$slug.redis-server.log" 2>&1) &
  fi
  SERVER_PID=$!
  wait_port "$PORT" || die "$kind did not answer PING on port $PORT (log: $OUT/logs/$slug.$kind-server.log)"
}

# --- the runs -------------------------------------------------------------------------------------
RUNNER_FLAGS=(--host 127.0.0.1 --clients 1 --timeout "$RUNNER_TIMEOUT" --ignore-encoding --ignore-digest
  --tags "$TAGS")
[ "$DURABLE" = 1 ] && RUNNER_FLAGS+=(--durable)
META=$OUT/runs.tsv
: >"$META"
for unit in "${UNITS[@]}"; do
  [ -f "$SUITE/tests/unit/$unit.tcl" ] || die "no unit $unit in $SRC"
  slug=${unit//\//-}
  for kind in redis halyard; do
    start_server "$kind" "$slug"
    log=$OUT/logs/$slug.$kind.log
    start=$(date +%s)
    rc=0
    (cd "$SUITE" && exec timeout -k 10 "$UNIT_TIMEOUT" "$TCLSH" tests/test_helper.tcl "${RUNNER_FLAGS[@]}" \
      --port "$PORT" --single "unit/$unit") >"$log" 2>&1 </dev/null || rc=$?
    secs=$(( $(date +%s) - start ))
    alive=1; kill -0 "$SERVER_PID" 2>/dev/null || alive=0
    stop_server
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$unit" "$kind" "$rc" "$secs" "$alive" "$log" >>"$META"
    printf '%-12s %-8s rc=%-3s %4ss%s\n' "$unit" "$kind" "$rc" "$secs" \
      "$([ "$alive" = 1 ] || echo '  (server died)')" >&2
  done
done

python3 - "$META" "$JSON" "$HALYARD" "$REDIS_REF" "$DURABLE" "$SHIM" "$TAGS" "$UNIT_TIMEOUT" "$OUT" <<'PY'
import json, re, sys
meta, json_out, halyard, ref, durable, shim, tags, unit_timeout, out = sys.argv[1:]
ansi = re.compile(r"\x1b\[[0-9;]*m")
tag = re.compile(r"^\[(ok|err|skip|ignore|exception|TIMEOUT)\]: ?(.*)$")

def parse(path, rc):
    lines = [ansi.sub("", l.rstrip("\n")) for l in open(path, errors="replace")]
    r = {"passed": 0, "failed": 0, "skipped": 0, "exception": None, "failures": [], "done": False}
    cur = None  # detail lines following an [err] or [exception]
    for l in lines:
        m = tag.match(l)
        if m:
            kind, text = m.groups()
            cur = None
            if kind == "ok":
                r["passed"] += 1
            elif kind in ("skip", "ignore"):
                r["skipped"] += 1
            elif kind == "err":
                r["failed"] += 1
                name = re.sub(r" in tests/unit/\S+$", "", text)
                cur = {"test": name, "detail": []}
                r["failures"].append(cur)
            elif kind == "exception":
                cur = {"test": None, "detail": [text]}
                r["exception"] = cur
            else:
                r["exception"] = {"test": None, "detail": ["runner TIMEOUT: no progress"]}
                cur = r["exception"]
            continue
        if re.match(r"^\[\d+/\d+ done\]: ", l):
            r["done"] = True
            cur = None
            continue
        if l.startswith("Testing ") or l.startswith("[ready]") or "The End" in l:
            cur = None
            continue
        if cur is not None and len(cur["detail"]) < 40:
            cur["detail"].append(l)
    if r["exception"] is not None:
        joined = "\n".join(r["exception"]["detail"])  # the trace names the test it was in
        m = re.findall(r'"test \{?([^\n"{}]+)', joined)
        r["exception"]["test"] = m[-1].strip() if m else None
    if not r["done"] and r["exception"] is None:
        why = "hard timeout (%ss)" % unit_timeout if rc in (124, 137) else "runner exited with status %d before the unit was done" % rc
        r["exception"] = {"test": None, "detail": [why]}
    r["exception_text"] = None if r["exception"] is None else next(
        (l.strip() for l in r["exception"]["detail"] if l.strip()), "")
    return r

runs = {}
for row in open(meta):
    unit, kind, rc, secs, alive, log = row.rstrip("\n").split("\t")
    r = parse(log, int(rc))
    r.update(seconds=int(secs), server_alive=alive == "1", log=log, status=int(rc))
    runs.setdefault(unit, {})[kind] = r

units = []
for unit, k in runs.items():
    R, H = k["redis"], k["halyard"]
    rtotal = R["passed"] + R["failed"] + R["skipped"]
    htotal = H["passed"] + H["failed"] + H["skipped"]
    H["not_run"] = max(0, rtotal - htotal) if H["exception"] else 0
    R["not_run"] = 0
    units.append({"unit": unit, "tests": rtotal, "redis": R, "halyard": H})

def exc_col(r):
    if not r["exception"]:
        return "-"
    if not r["server_alive"]:
        return "yes (server died)"
    t = r["exception_text"] or "yes"
    return "yes: " + (t[:70] + "..." if len(t) > 73 else t)

hdr = ["unit", "redis passed", "halyard passed", "failed", "skipped", "not run", "exception", "redis failed"]
rows = [[u["unit"], u["redis"]["passed"], u["halyard"]["passed"], u["halyard"]["failed"], u["halyard"]["skipped"],
         u["halyard"]["not_run"], exc_col(u["halyard"]), u["redis"]["failed"]] for u in units]
tot_r = sum(u["redis"]["passed"] for u in units); tot_h = sum(u["halyard"]["passed"] for u in units)
rows.append(["total", tot_r, tot_h, sum(u["halyard"]["failed"] for u in units),
             sum(u["halyard"]["skipped"] for u in units), sum(u["halyard"]["not_run"] for u in units),
             "%d units" % sum(1 for u in units if u["halyard"]["exception"]),
             sum(u["redis"]["failed"] for u in units)])
rows = [[str(c) for c in r] for r in rows]
w = [max(len(r[i]) for r in rows + [hdr]) for i in range(len(hdr))]
fmt = lambda r: "| " + " | ".join(c.ljust(w[i]) for i, c in enumerate(r)) + " |"
notes = []
if shim == "1": notes.append("harness shim: FUNCTION FLUSH / CONFIG SET of start_server overrides wrapped in catch")
if durable == "1": notes.append("--durable: errors inside a test count as that test's failure")
print(f"\nRedis {ref} test suite, external mode; tags: {tags}" + "".join("; " + n for n in notes))
print("failed / skipped / not run / exception are Halyard's; 'redis failed' is redis-server's own\n")
print(fmt(hdr)); print("|" + "|".join("-" * (x + 2) for x in w) + "|")
for r in rows: print(fmt(r))
ratio = tot_h / tot_r if tot_r else 0.0
print(f"\nHalyard passed {tot_h} of the {tot_r} tests redis-server passed: ratio {ratio:.3f}")
for u in units:
    for kind in ("redis", "halyard"):
        e = u[kind]["exception"]
        if e:
            print(f"  {kind} {u['unit']}: unit ended early: {u[kind]['exception_text']}"
                  + (f" (in test: {e['test']})" if e.get("test") else "") + f"  [{u[kind]['log']}]")
print(f"raw logs: {out}/logs")
if json_out:
    doc = {"redis_ref": ref, "halyard": halyard, "tags": tags, "durable": durable == "1",
           "harness_shim": shim == "1", "unit_timeout_s": int(unit_timeout), "logs": out + "/logs",
           "redis_passed": tot_r, "halyard_passed": tot_h, "ratio": round(ratio, 4), "units": units}
    with open(json_out, "w") as f:
        json.dump(doc, f, indent=1)
PY
