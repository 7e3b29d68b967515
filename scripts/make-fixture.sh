#!/usr/bin/env bash
# Writes a format fixture: the store that `crates/engine/tests/common/fixture.rs` makes, with the
# engine of the checked-out tree, archived as crates/engine/tests/fixtures/format-N.tar.gz
# (N = the format version that engine writes, read from its superblock).
#
#   scripts/make-fixture.sh            # with this tree's engine
#
# To make the fixture of an older format, run this script in a worktree of the commit that
# wrote it (copying the example and tests/common/fixture.rs there if it predates them) and move
# the archive here. tests/format.rs opens every archive and reads every key back.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo run --quiet --release -p halyard-engine --example make_fixture -- "$tmp/store"
# The superblock's format_version (bytes 8..12); copy A or B, whichever is newer, holds the same.
version=$(od -An -t u4 -j 8 -N 4 "$tmp/store/data.hly" | tr -d ' ')
if [ "$version" = 0 ]; then version=$(od -An -t u4 -j 4104 -N 4 "$tmp/store/data.hly" | tr -d ' '); fi
out=crates/engine/tests/fixtures/format-$version.tar.gz
rm -f "$tmp/store/LOCK"
tar -C "$tmp/store" --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 -cf - . | gzip -9n > "$out"
echo "wrote $out ($(stat -c %s "$out") bytes)"
