//! Format stability: every committed fixture (`tests/fixtures/format-N.tar.gz`, a store written
//! by the engine of format N, see `scripts/make-fixture.sh`) opens with this build and reads
//! back exactly what its workload wrote; a store of format 1, which left a partly filled
//! large-log segment per restart, gets those segments back from GC.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

#[path = "common/fixture.rs"]
#[allow(dead_code, reason = "the make_fixture example uses the rest of the workload")]
mod fixture;

use halyard_engine::Db;
use std::path::Path;
use std::process::Command;

fn unpack(archive: &Path, into: &Path) {
    let ok = Command::new("tar").arg("-xzf").arg(archive).arg("-C").arg(into).status().expect("run tar");
    assert!(ok.success(), "tar could not unpack {}", archive.display());
}

fn archives() -> Vec<std::path::PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut v: Vec<_> = std::fs::read_dir(&dir)
        .expect("fixtures directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.to_string_lossy().ends_with(".tar.gz"))
        .collect();
    v.sort();
    v
}

#[test]
fn every_fixture_opens_and_reads_back_its_workload() {
    let all = archives();
    assert!(!all.is_empty(), "no fixture found");
    for a in all {
        let dir = tempfile::tempdir().expect("tempdir");
        unpack(&a, dir.path());
        let db = Db::open(dir.path(), fixture::options()).expect("open fixture");
        let got: Vec<_> = db.scan(..).map(|r| r.expect("scan")).collect();
        let want: Vec<_> = fixture::expected(fixture::ROUNDS).into_iter().collect();
        assert_eq!(got.len(), want.len(), "{}: key count", a.display());
        assert!(got == want, "{}: contents differ", a.display());
        for (k, v) in &want {
            assert_eq!(db.get(k).expect("get").as_ref(), Some(v), "{}: get {k:?}", a.display());
        }
        // Since format 3 some pairs carry an expiry time, and only they.
        let expiring = want.iter().filter(|(k, _)| db.get_with_expiry(k).expect("get").is_some_and(|e| e.1 != 0));
        let times: std::collections::BTreeSet<u64> =
            want.iter().filter_map(|(k, _)| db.get_with_expiry(k).expect("get")).map(|e| e.1).collect();
        if a.to_string_lossy().contains("format-1") || a.to_string_lossy().contains("format-2") {
            assert_eq!(expiring.count(), 0, "{}: an old format with expiry times", a.display());
        } else {
            assert!(expiring.count() > 0, "{}: no pair expires", a.display());
            assert!(times.iter().all(|t| *t == 0 || *t == fixture::EXPIRES_AT), "{}: times {times:?}", a.display());
        }
        // Since format 5 the store was split after round 0.
        let old = ["format-1", "format-2", "format-3", "format-4"].iter().any(|f| a.to_string_lossy().contains(f));
        assert_eq!(db.regions().len(), if old { 1 } else { 2 }, "{}: regions", a.display());
        // It takes writes and reopens.
        fixture::write_round(&db, fixture::ROUNDS + 1).expect("write");
        drop(db);
        let db = Db::open(dir.path(), fixture::options()).expect("reopen fixture");
        let got: Vec<_> = db.scan(..).map(|r| r.expect("scan")).collect();
        let want: Vec<_> = fixture::expected(fixture::ROUNDS + 1).into_iter().collect();
        assert!(got == want, "{}: contents differ after a round and a reopen", a.display());
    }
}

#[test]
fn format_1_partly_filled_large_log_segments_are_reclaimed() {
    let dir = tempfile::tempdir().expect("tempdir");
    unpack(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/format-1.tar.gz"), dir.path());
    let db = Db::open(dir.path(), fixture::options()).expect("open fixture");
    let before = db.stats().log_segments[2];
    assert!(before >= fixture::ROUNDS as u64, "the format-1 store holds {before} large-log segments");
    // GC may take only what L1 covers; then passes learn each old segment's fill and take
    // the ones with few live bytes.
    db.flush().expect("flush");
    for _ in 0..8 {
        db.gc().expect("gc");
    }
    let s = db.stats();
    // About 240 KB of live large values need four 64 KiB segments; the records GC moved wait in
    // new segments for the next flush.
    assert!(s.log_segments[2] <= 8, "large-log segments: {before} before, {} after GC", s.log_segments[2]);
    assert_eq!(s.partly_filled_log_segments, 0);
    let got: Vec<_> = db.scan(..).map(|r| r.expect("scan")).collect();
    let want: Vec<_> = fixture::expected(fixture::ROUNDS).into_iter().collect();
    assert!(got == want, "contents differ after GC");
}
