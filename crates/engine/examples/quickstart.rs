//! A tour of the engine's API: `cargo run --release -p halyard-engine --example quickstart [DIR]`.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options, ScanOptions, SyncMode, WriteBatch};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::args().nth(1).unwrap_or_else(|| "halyard-quickstart".into());
    // Every write is durable before it returns; the default (Group) syncs every 5 ms.
    let db = Db::open(&dir, Options { sync: SyncMode::Always, ..Options::default() })?;

    db.put(b"apple", b"red")?;
    db.put(b"banana", &vec![b'y'; 300])?; // a medium pair: transient log, merged in place later
    db.put(b"cherry", &vec![b'c'; 4000])?; // a large pair: large log, garbage collected
    println!("apple = {:?}", db.get(b"apple")?.map(String::from_utf8));

    let before = db.snapshot();
    let mut batch = WriteBatch::new();
    batch.put("apple", "green").delete("banana");
    db.write(&batch)?; // atomic, also across a crash

    println!("now:      apple = {:?}", db.get(b"apple")?.map(String::from_utf8));
    println!("snapshot: apple = {:?}", before.get(b"apple")?.map(String::from_utf8));

    for kv in db.scan_with(.., ScanOptions { reverse: true, limit: Some(10) }) {
        let (k, v) = kv?;
        println!("{} -> {} bytes", String::from_utf8_lossy(&k), v.len());
    }

    db.flush()?;
    let s = db.stats();
    println!(
        "device: {} B written, {} B read; user bytes {}; levels {:?}; direct I/O {}",
        s.device_write_bytes,
        s.device_read_bytes,
        s.user_bytes_written,
        s.levels.iter().map(|l| l.ssts).collect::<Vec<_>>(),
        s.direct_io
    );
    Ok(())
}
