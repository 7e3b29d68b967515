//! Restarts cost nothing: a store opened, written a little and closed (or killed with SIGKILL)
//! a thousand times keeps its space within live data plus a few segments, and its last open
//! reads no more than a bound that does not depend on the number of restarts.
//!
//! `HALYARD_RESTARTS` (default 1000) sets the number of restarts of each test.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options, Stats, SyncMode, WriteBatch};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// The two tests run one at a time: a child spawned by one inherits, between fork and exec, the
/// other's lock file descriptor, and a reopen in that window would find the store locked.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn restarts() -> u64 {
    std::env::var("HALYARD_RESTARTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1000)
}

/// Round `r`'s writes: 10 values of 2,000 B (large) and 10 of 20 B (small) over 20 keys, so
/// the live data stays about 21 KB however many rounds run.
fn round(r: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for i in 0..10u64 {
        let mut v = format!("round {r} large {i} ").into_bytes();
        v.resize(2000, b'a' + (r % 26) as u8);
        out.push((format!("large{i}").into_bytes(), v));
        out.push((format!("small{i}").into_bytes(), format!("{r:>8}/{i:<10}").into_bytes()));
    }
    out
}

fn live_bytes(m: &Model) -> u64 {
    m.iter().map(|(k, v)| (k.len() + v.len()) as u64).sum()
}

/// Every restart-independent bound: segments in use within live data plus `slack` segments,
/// the last open's reads within `reads` segments, and no partly filled log segment left.
fn check_bounds(stats: &Stats, model: &Model, opts: &Options, slack: u64, reads: u64, what: &str) {
    let seg = opts.segment_bytes;
    let live = live_bytes(model);
    eprintln!(
        "{what}: {} B allocated for {live} B live, last open read {} B in {:.4} s; log segments {:?}, \
         {} partly filled",
        stats.space_allocated_bytes,
        stats.open_read_bytes,
        stats.open_seconds,
        stats.log_segments,
        stats.partly_filled_log_segments
    );
    assert!(
        stats.space_allocated_bytes <= live + slack * seg,
        "{what}: {} bytes allocated for {live} live bytes (more than {slack} segments over)",
        stats.space_allocated_bytes
    );
    assert!(
        stats.open_read_bytes <= reads * seg,
        "{what}: the last open read {} bytes (bound {reads} segments)",
        stats.open_read_bytes
    );
    assert_eq!(stats.partly_filled_log_segments, 0, "{what}: partly filled log segments left behind");
}

fn contents(db: &Db) -> Model {
    db.scan(..).map(|r| r.expect("scan")).collect()
}

#[test]
fn thousand_clean_restarts_keep_space_and_open_reads_flat() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = Options::default();
    let mut model = Model::new();
    for r in 0..restarts() {
        let db = Db::open(dir.path(), opts.clone()).expect("open");
        for (k, v) in round(r) {
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
    }
    let db = Db::open(dir.path(), opts.clone()).expect("open");
    assert_eq!(contents(&db), model);
    // The redo chain (up to 4 segments), the L0 and large-log tails, L1 and its medium log.
    check_bounds(&db.stats(), &model, &opts, 8, 8, "after clean restarts");
}

/// The writer of `thousand_kills`: opens the store, writes `HALYARD_RESTART_ROUND`'s pairs one
/// by one under `SyncMode::Always`, printing "ack N" after each, then waits to be killed.
#[test]
fn restart_writer_child() {
    let Ok(dir) = std::env::var("HALYARD_RESTART_DIR") else { return };
    let r: u64 = std::env::var("HALYARD_RESTART_ROUND").ok().and_then(|s| s.parse().ok()).expect("round");
    let db = Db::open(&dir, Options { sync: SyncMode::Always, ..Options::default() }).expect("writer open");
    let mut out = std::io::stdout().lock();
    for (i, (k, v)) in round(r).into_iter().enumerate() {
        let mut b = WriteBatch::new();
        b.put(k, v);
        db.write(&b).expect("write");
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("stdout");
    }
    writeln!(out, "done").expect("stdout");
    out.flush().expect("stdout");
    std::thread::sleep(std::time::Duration::from_secs(60));
}

#[test]
fn thousand_kills_keep_every_acknowledged_write_and_the_bounds() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    let opts = Options::default();
    let mut model = Model::new();
    // Keys whose last write was in flight at a kill, with the values it may have left.
    let mut maybe: BTreeMap<Vec<u8>, Vec<Vec<u8>>> = BTreeMap::new();
    let n = restarts();
    for r in 0..n {
        let mut child = Command::new(&exe)
            .args(["--exact", "restart_writer_child", "--nocapture", "--test-threads=1"])
            .env("HALYARD_RESTART_DIR", dir.path())
            .env("HALYARD_RESTART_ROUND", r.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn writer");
        let stdout = child.stdout.take().expect("stdout");
        let writes = round(r);
        // Kill at a different point each round: after 0..=20 acknowledged writes.
        let kill_after = (r * 7) % (writes.len() as u64 + 1);
        let mut acked = 0u64;
        let mut lines = BufReader::new(stdout).lines();
        while acked < kill_after {
            let Some(Ok(line)) = lines.next() else { break };
            if line.starts_with("ack ") {
                acked += 1;
            }
        }
        child.kill().expect("SIGKILL");
        let _ = child.wait();
        for (i, (k, v)) in writes.into_iter().enumerate() {
            if (i as u64) < acked {
                maybe.remove(&k);
                model.insert(k, v);
            } else {
                // In flight when the writer died, or acknowledged after the last "ack" read
                // here: it may or may not be there.
                maybe.entry(k).or_default().push(v);
            }
        }
        if r % 50 == 49 || r + 1 == n {
            let db = Db::open(dir.path(), opts.clone()).expect("open after SIGKILL");
            let got = contents(&db);
            for (k, v) in &model {
                let g = got.get(k);
                let in_flight = maybe.get(k).is_some_and(|m| m.iter().any(|x| Some(x) == g));
                assert!(g == Some(v) || in_flight, "round {r}: acknowledged write of {k:?} lost");
            }
            model = got;
            maybe.clear();
        }
    }
    let db = Db::open(dir.path(), opts.clone()).expect("open");
    check_bounds(&db.stats(), &model, &opts, 8, 8, "after SIGKILLs");
}

/// A process killed while it created a store leaves a data file without a superblock and the
/// creation marker: the next open creates the store again. Without the marker such a file is
/// refused and left untouched.
#[test]
fn an_interrupted_creation_is_created_again_and_a_damaged_store_is_refused() {
    let dir = tempfile::tempdir().expect("dir");
    std::fs::write(dir.path().join(halyard_engine::DATA_FILE), vec![0u8; 1 << 16]).expect("data file");
    let refused = Db::open(dir.path(), Options::default());
    assert!(matches!(refused, Err(halyard_engine::Error::Corruption { .. })), "a file without a superblock was opened");
    std::fs::write(dir.path().join("creating"), b"").expect("marker");
    let db = Db::open(dir.path(), Options::default()).expect("created again");
    db.put(b"k", b"v").expect("put");
    drop(db);
    assert!(!dir.path().join("creating").exists(), "the marker outlived the creation");
    let db = Db::open(dir.path(), Options::default()).expect("reopen");
    assert_eq!(db.get(b"k").expect("get").as_deref(), Some(b"v".as_slice()));
}

/// A store opened quiet (`Options::open_quiet`: a cluster node started again after a crash,
/// before its map says which regions it still leads) runs no compaction, GC or flush at close
/// on the regions it led until each is woken; their data is all there, and once woken the
/// work runs.
#[test]
fn a_store_opened_quiet_leaves_its_regions_alone_until_woken() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().expect("tempdir");
    let quiet = || Options { open_quiet: true, ..Options::tiny() };
    let mut model = Model::new();
    drop(Db::open(dir.path(), Options::tiny()).expect("create"));
    let db = Db::open(dir.path(), quiet()).expect("open quiet");
    assert!(db.regions().iter().all(|r| r.quiet), "{:?}", db.regions());
    // About one and a half L0 tables: one switched table waits for its merge (a second would
    // make the writer wait for the region to wake).
    let v = vec![b'q'; 100];
    let mut i = 0u64;
    while db.stats().l0_bytes < Options::tiny().l0_bytes as u64 * 5 / 4 {
        assert!(i < 5000, "L0 still small after {i} writes");
        let k = format!("quiet{i:05}").into_bytes();
        db.put(&k, &v).expect("put");
        model.insert(k, v.clone());
        i += 1;
    }
    db.flush().expect("a flush passes a quiet region by");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let s = db.stats();
    assert_eq!((s.compactions, s.gc_runs), (0, 0), "background work ran on a quiet region");
    drop(db);
    let db = Db::open(dir.path(), quiet()).expect("reopen quiet");
    assert!(db.stats().l0_bytes >= s.l0_bytes, "flushed at close: {} of {} L0 bytes", db.stats().l0_bytes, s.l0_bytes);
    assert_eq!(contents(&db), model, "closed quiet, reopened from its log");
    // One more write switches the recovered table, whose merge waits for the wake.
    db.put(b"quiet-last", &v).expect("put");
    model.insert(b"quiet-last".to_vec(), v.clone());
    db.wake_region(0).expect("wake");
    assert!(db.regions().iter().all(|r| !r.quiet));
    let t0 = std::time::Instant::now();
    while db.stats().gc_runs == 0 || db.stats().compactions == 0 {
        assert!(t0.elapsed() < std::time::Duration::from_secs(30), "no GC or merge on the woken region");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(contents(&db), model);
}
