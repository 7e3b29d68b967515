#!/usr/bin/env bash
# Installs what the tests drive (Debian's redis-server, redis-tools; the redis Python
# package), then runs the whole test suite. Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v redis-server >/dev/null || need+=(redis-server)
command -v redis-cli >/dev/null || need+=(redis-tools)
command -v redis-benchmark >/dev/null || need+=(redis-tools)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
python3 - <<'PY' 2>/dev/null || python3 -m pip install --quiet 'redis>=5'
import redis, sys
sys.exit(0 if int(redis.__version__.split(".")[0]) >= 5 else 1)
PY
cargo test --workspace "$@"
