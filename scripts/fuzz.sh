#!/usr/bin/env bash
# Runs every cargo-fuzz target for a bounded time (default 20 s each; FUZZ_SECONDS to change).
# Needs nightly Rust and cargo-fuzz; installs them when missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs="${FUZZ_SECONDS:-20}"
rustup toolchain list | grep -q nightly || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for t in log_record redo_edits sst_node sst_descriptor bloom_filter native_frame resp_request replication_frame backup_list dump_payload msgpack_unpack segstore_message; do
  echo "fuzz: $t for ${secs}s"
  cargo +nightly fuzz run "$t" -- -max_total_time="$secs" -rss_limit_mb=2048 2>&1 | tail -n 3
done
