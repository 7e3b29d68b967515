//! Crash recovery: a writer runs as a separate process and is killed with SIGKILL at random
//! moments (mid-write, mid-compaction, mid-GC). After each kill the store must open, be
//! consistent, and hold exactly the state after some prefix of the operations: one that
//! includes every acknowledged operation under `SyncMode::Always`, and never one with holes
//! under `SyncMode::Group`.
//!
//! `HALYARD_CRASH_CYCLES` (default 30) sets the number of kills, `HALYARD_CRASH_SEED` the seed.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options, SyncMode, WriteBatch};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEYS: u64 = 400;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(k: u64) -> Vec<u8> {
    format!("key{k:05}").into_bytes()
}

/// Operation `i`: a list of writes applied atomically.
fn op(i: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let width = if i.is_multiple_of(29) { 4 } else { 1 };
    (0..width)
        .map(|j| {
            let k = key((i * 7 + j * 13) % KEYS);
            if i.is_multiple_of(13) && j == 0 {
                return (k, None);
            }
            let len = [8usize, 25, 60, 150, 400, 1200][((i + j) % 6) as usize];
            let mut v = format!("{i}/{j}:").into_bytes();
            v.resize(len, b'a' + (i % 26) as u8);
            (k, Some(v))
        })
        .collect()
}

fn apply(m: &mut Model, i: u64) {
    for (k, v) in op(i) {
        match v {
            Some(v) => m.insert(k, v),
            None => m.remove(&k),
        };
    }
}

fn options(sync: SyncMode) -> Options {
    Options { sync, dranges: 4, ..Options::tiny() }
}

fn sync_mode(name: &str) -> SyncMode {
    if name == "always" {
        SyncMode::Always
    } else {
        SyncMode::Group
    }
}

/// The writer process: applies operations from START on and prints "ack N" after each
/// acknowledged one. Does nothing unless started by `crash_recovery_under_sigkill`.
#[test]
fn crash_writer_child() {
    let Ok(dir) = std::env::var("HALYARD_CRASH_DIR") else { return };
    let start: u64 = std::env::var("HALYARD_CRASH_START").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let sync = sync_mode(&std::env::var("HALYARD_CRASH_SYNC").unwrap_or_default());
    let db = Db::open(&dir, options(sync)).expect("writer open");
    let mut out = std::io::stdout().lock();
    for i in start.. {
        let ops = op(i);
        if ops.len() == 1 {
            match &ops[0] {
                (k, Some(v)) => db.put(k, v).expect("put"),
                (k, None) => db.delete(k).expect("delete"),
            }
        } else {
            let mut b = WriteBatch::new();
            for (k, v) in ops {
                match v {
                    Some(v) => b.put(k, v),
                    None => b.delete(k),
                };
            }
            db.write(&b).expect("batch");
        }
        writeln!(out, "ack {i}").expect("stdout");
        out.flush().expect("stdout");
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn contents(db: &Db) -> Model {
    db.scan(..).map(|r| r.expect("scan after recovery")).collect()
}

#[test]
fn crash_recovery_under_sigkill() {
    let cycles: usize = std::env::var("HALYARD_CRASH_CYCLES").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let seed: u64 = std::env::var("HALYARD_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64) | 1
    });
    eprintln!("crash test: {cycles} cycles, HALYARD_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = std::env::current_exe().expect("test binary");
    // State after operations 0..next (exclusive).
    let mut model = Model::new();
    let mut next: u64 = 0;
    let mut total_acked = 0;
    for cycle in 0..cycles {
        let sync = if cycle % 2 == 0 { "always" } else { "group" };
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_writer_child", "--nocapture", "--test-threads=1"])
            .env("HALYARD_CRASH_DIR", dir.path())
            .env("HALYARD_CRASH_START", next.to_string())
            .env("HALYARD_CRASH_SYNC", sync)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn writer");
        let acked = Arc::new(AtomicI64::new(-1));
        let reader = {
            let acked = acked.clone();
            let stdout = child.stdout.take().expect("stdout");
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    if let Some(n) = line.strip_prefix("ack ").and_then(|n| n.parse::<i64>().ok()) {
                        acked.store(n, Ordering::SeqCst);
                    }
                }
            })
        };
        // Let it get going, then kill it somewhere in the middle of its work.
        let t0 = Instant::now();
        while acked.load(Ordering::SeqCst) < 0 && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(20 + rng.next() % 400));
        child.kill().expect("SIGKILL");
        let status = child.wait().expect("wait");
        reader.join().expect("reader");
        let last_acked = acked.load(Ordering::SeqCst);
        assert!(last_acked >= next as i64, "cycle {cycle}: writer acknowledged nothing ({status:?})");
        total_acked += (last_acked + 1 - next as i64) as u64;

        let db = Db::open(dir.path(), options(SyncMode::Group)).expect("open after SIGKILL");
        let got = contents(&db);
        // Find the prefix the store holds: at most one operation was in flight.
        let mut found = None;
        let mut m = model.clone();
        for p in next..=(last_acked as u64 + 1) {
            if got == m {
                found = Some(p);
                break;
            }
            apply(&mut m, p);
        }
        if found.is_none() && got == m {
            found = Some(last_acked as u64 + 2);
        }
        let Some(p) = found else {
            let diff: Vec<_> = got.keys().chain(m.keys()).filter(|k| got.get(*k) != m.get(*k)).take(5).collect();
            panic!("cycle {cycle} ({sync}): recovered state is no prefix of the operations (acked up to {last_acked}); differing keys {diff:?}");
        };
        if sync == "always" {
            assert!(
                p as i64 > last_acked,
                "cycle {cycle}: acknowledged operation {last_acked} lost under SyncMode::Always (recovered up to {p})"
            );
        }
        for i in next..p {
            apply(&mut model, i);
        }
        next = p;
        drop(db);
    }
    eprintln!("crash test: {cycles} kills, {total_acked} acknowledged operations, recovered through op {next}");
}
