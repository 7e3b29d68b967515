//! Measures a region split under writes: loads MIB mebibytes into one region, then splits it at
//! its middle key while writer threads go on, and prints how long the split took, the longest
//! write before it and during it (the first second of the halves included), the bytes the
//! device wrote during it, how long the split held the writers and what the device wrote
//! meanwhile, and the store's space before the split and after its halves' clean-up. With
//! `--no-split` it runs the same writes and clean-up without the split: the control whose space
//! tells the split's own share from the overwrites' dead values.
//!
//!   cargo run --release -p halyard-engine --example split_pause -- DIR [MIB] [WRITERS] [--no-split]

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "a measuring tool: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VALUE: usize = 1000;

fn key(i: u64) -> Vec<u8> {
    format!("key{i:012}").into_bytes()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(dir) = args.get(1) else {
        eprintln!("usage: split_pause DIR [MIB (default 1024)] [WRITERS (default 4)]   (DIR must not hold a store)");
        std::process::exit(2);
    };
    let mib: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1024);
    let writers: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4);
    let split = !args.iter().any(|a| a == "--no-split");
    let db = Arc::new(Db::open(dir, Options::default()).expect("open"));
    let n = (mib << 20) / VALUE as u64;
    for i in 0..n {
        db.put(&key(i * 7919 % n), &vec![b'v'; VALUE]).expect("load");
    }
    db.compact().expect("compact");
    let space_before = db.stats().space_allocated_bytes;
    let stop = Arc::new(AtomicBool::new(false));
    // The longest write (µs) in the current phase; the phase flips at the split's start.
    let longest = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
    let phase = Arc::new(AtomicU64::new(0));
    let threads: Vec<_> = (0..writers)
        .map(|t| {
            let (db, stop, longest, phase) = (db.clone(), stop.clone(), longest.clone(), phase.clone());
            std::thread::spawn(move || {
                let mut i = t;
                while !stop.load(Ordering::Relaxed) {
                    let t0 = Instant::now();
                    db.put(&key(i * 7919 % n), &vec![b'w'; VALUE]).expect("write");
                    let us = t0.elapsed().as_micros() as u64;
                    longest[phase.load(Ordering::Relaxed) as usize].fetch_max(us, Ordering::Relaxed);
                    i += writers;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(3));
    let written_before = db.stats().device_write_bytes;
    phase.store(1, Ordering::Relaxed);
    let t0 = Instant::now();
    if split {
        db.split_region(0, &key(n / 2), 1).expect("split");
    }
    let took = t0.elapsed();
    let s = db.stats();
    let written = s.device_write_bytes - written_before;
    let (held_us, held_written) = (s.split_pause_max_us, s.split_pause_max_written);
    std::thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join().expect("writer");
    }
    for _ in 0..30 {
        db.flush().expect("flush");
        db.compact().expect("compact");
        if db.stats().range_dels == 0 {
            break;
        }
    }
    let space_after = db.stats().space_allocated_bytes;
    println!(
        "{{\"mib\": {mib}, \"writers\": {writers}, \"split\": {split}, \"split_ms\": {:.1}, \"longest_write_before_ms\": {:.1}, \
         \"longest_write_during_ms\": {:.1}, \"device_bytes_during_split\": {written}, \
         \"writers_held_ms\": {:.1}, \"written_while_held\": {}, \
         \"space_before\": {space_before}, \"space_after_cleanup\": {space_after}}}",
        took.as_secs_f64() * 1e3,
        longest[0].load(Ordering::Relaxed) as f64 / 1e3,
        longest[1].load(Ordering::Relaxed) as f64 / 1e3,
        held_us as f64 / 1e3,
        held_written,
    );
}
