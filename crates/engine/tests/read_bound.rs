//! `Db::read_bound`: an upper bound of the LSN of a key's newest version, which replication
//! waits for before answering a read. It must never fall below a version a read saw or a write
//! made (else a read could be answered before its backups hold what it saw), and should not
//! rise with other keys' writes (else every read waits for every write).

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Options};

fn open(dir: &std::path::Path) -> Db {
    Db::open(dir, Options { direct_io: false, cache_bytes: 8 << 20, ..Options::default() }).unwrap()
}

#[test]
fn the_bound_follows_the_key_not_the_region() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let r = db.region(0).unwrap();
    let a = r.put(b"a", b"1").unwrap();
    assert_eq!(db.read_bound(b"a").unwrap(), a);
    for i in 0..100u32 {
        r.put(format!("b{i}").as_bytes(), b"x").unwrap();
    }
    assert_eq!(db.read_bound(b"a").unwrap(), a, "other keys' writes leave a's bound alone");
    let d = r.delete(b"a").unwrap();
    assert_eq!(db.read_bound(b"a").unwrap(), d, "a delete is a version too");
    let rd = r.delete_range(b"b10", b"b20").unwrap();
    assert!(db.read_bound(b"b15").unwrap() >= rd, "a range delete over the key counts");
}

#[test]
fn keys_in_the_levels_are_bounded_below_l0() {
    let dir = tempfile::tempdir().unwrap();
    let db = open(dir.path());
    let r = db.region(0).unwrap();
    let a = r.put(b"a", b"1").unwrap();
    db.flush().unwrap();
    // L0 is empty now: a's version lies in the levels, at or below the bound.
    let empty = db.read_bound(b"a").unwrap();
    assert!(empty >= a);
    let mut last = 0;
    for i in 0..50u32 {
        last = r.put(format!("c{i}").as_bytes(), &[7u8; 64]).unwrap();
    }
    let bound = db.read_bound(b"a").unwrap();
    assert!(bound >= a, "bound {bound} below a's version {a}");
    assert!(bound < last, "L0 holds writes after a: the bound stops below them ({bound} < {last})");
    assert!(db.read_bound(b"never").unwrap() < last);
}

#[test]
fn concurrent_writers_never_see_a_bound_below_their_write() {
    let dir = tempfile::tempdir().unwrap();
    let db = std::sync::Arc::new(open(dir.path()));
    let threads: Vec<_> = (0..4u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                let r = db.region(0).unwrap();
                for i in 0..3000u32 {
                    let k = format!("k{}", i % 97);
                    let lsn = r.put(k.as_bytes(), &[t; 100]).unwrap();
                    let bound = db.read_bound(k.as_bytes()).unwrap();
                    assert!(bound >= lsn, "write {lsn} of {k} returned, bound {bound}");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}
