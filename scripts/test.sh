#!/usr/bin/env bash
# Installs what the tests need (Debian packages below; the redis Python
# package), then runs the whole test suite. Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
# redis-server and redis-tools: the server tests drive redis-cli and redis-benchmark and compare
# with a real redis-server; librocksdb-dev, libclang-dev and clang: the benchmark's RocksDB and
# BlobDB baselines (Debian's librocksdb 7.8.3, with the rocksdb crate 0.21.0: see
# crates/bench/README.md); fonts-dejavu-core: text in the plots.
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for p in redis-server redis-tools librocksdb-dev libclang-dev clang fonts-dejavu-core; do
  installed "$p" || need+=("$p")
done
# etcd: the cluster tests start real etcd servers.
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
# Go: the linearizability checker (tools/lincheck, Porcupine) the robustness test runs.
if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then need+=(golang-go); fi
# iptables: the split-brain test cuts a node off with it.
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# chromium: the web console's test loads the page in headless Chromium.
command -v chromium >/dev/null 2>&1 || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Every program a test starts is here now (a missing one would fail its tests one by one).
[ -x /usr/local/go/bin/go ] && export PATH="$PATH:/usr/local/go/bin"
for b in etcd redis-server redis-cli redis-benchmark go iptables chromium; do
  command -v "$b" >/dev/null 2>&1 || { echo "scripts/test.sh: $b is still missing after the install step" >&2; exit 1; }
done
python3 - <<'PY' 2>/dev/null || python3 -m pip install --quiet 'redis>=5'
import redis, sys
sys.exit(0 if int(redis.__version__.split(".")[0]) >= 5 else 1)
PY
export ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu
# With RocksDB and BlobDB linked into the benchmark (its smoke run covers all three engines):
# one build of the workspace (a second build of the benchmark alone would resolve its
# dependencies' features apart and compile most of them again).
cargo test --workspace --features halyard-bench/rocksdb "$@"
