#!/usr/bin/env bash
# Checks the workspace's minimum supported Rust version: every crate inherits the workspace's
# `rust-version`, and the workspace builds (cargo check) with that toolchain, installed here
# with rustup when missing. Its own target directory keeps the main build's artifacts apart.
set -euo pipefail
cd "$(dirname "$0")/.."
msrv=$(sed -n 's/^rust-version = "\(.*\)"/\1/p' Cargo.toml)
[ -n "$msrv" ] || { echo "msrv: Cargo.toml sets no workspace rust-version" >&2; exit 1; }
for t in crates/*/Cargo.toml; do
  grep -q '^rust-version.workspace = true' "$t" || { echo "msrv: $t does not inherit rust-version" >&2; exit 1; }
done
rustup toolchain list | grep -q "^$msrv" || rustup toolchain install "$msrv" --profile minimal >/dev/null
PROTOC=/nonexistent/protoc CARGO_TARGET_DIR=target/msrv cargo "+$msrv" check --workspace --all-targets --quiet
echo "msrv: every crate builds with Rust $msrv"
