#!/usr/bin/env bash
# The workspace's minimum supported Rust version (`rust-version` in Cargo.toml).
#   scripts/msrv.sh          every crate inherits it (CI; clippy's incompatible_msrv lint, which
#                            CI runs with -D warnings, then refuses std APIs newer than it)
#   scripts/msrv.sh --build  also checks the whole workspace with that toolchain (installed with
#                            rustup when missing; about 4 minutes on 2 cores, its own target dir)
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "msrv: Cargo.toml sets no workspace rust-version" >&2; exit 1; }
for t in crates/*/Cargo.toml; do
  grep -q '^rust-version.workspace = true' "$t" || { echo "msrv: $t does not inherit rust-version" >&2; exit 1; }
done
if grep -rq 'incompatible_msrv' --include=*.rs --include=*.toml crates Cargo.toml clippy.toml; then
  echo "msrv: something allows clippy::incompatible_msrv" >&2; exit 1
fi
echo "msrv: every crate inherits rust-version $msrv"
if [ "${1:-}" = --build ]; then
  rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal >/dev/null
  CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --all-targets --quiet
  echo "msrv: the workspace builds with Rust $msrv"
fi
