#!/usr/bin/env bash
# Linearizability under faults, many runs: a real etcd and three `halyard serve --etcd` nodes
# per run, one fault per run (SIGKILL of the primary, SIGKILL of the master, SIGSTOP of the
# primary past its lease, the primary cut off by iptables past its lease: needs root),
# histories of native and Redis clients checked with Porcupine (tools/lincheck). Prints a
# table: run, fault, seed, operations, acknowledged and unanswered puts, lost acknowledged
# writes, verdict. Failing histories (and their HTML visualisation) are kept under
# $TMPDIR/halyard-robustness/.
#   bash scripts/robustness.sh --runs 30 [--seed 100]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=9; seed=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
    *) echo "robustness.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
HALYARD_ROBUSTNESS_RUNS="$runs" HALYARD_ROBUSTNESS_SEED="$seed" \
  cargo test --release -p halyard --test robustness -- --nocapture
