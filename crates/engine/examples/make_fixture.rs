//! Writes the format fixture store into the directory given as the only argument (used by
//! `scripts/make-fixture.sh`; the workload is `tests/common/fixture.rs`).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

#[path = "../tests/common/fixture.rs"]
#[allow(dead_code, reason = "the test side uses the rest of the workload")]
mod fixture;

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: make_fixture DIR   (DIR must not hold a store yet)");
        std::process::exit(2);
    };
    if let Err(e) = fixture::make(std::path::Path::new(&dir)) {
        eprintln!("make_fixture: {e}");
        std::process::exit(1);
    }
}
