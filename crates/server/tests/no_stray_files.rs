//! A store on storage without a directory (`Db::open_on`) writes nothing into the process's
//! working directory: neither the engine nor the Redis key space's bookkeeping. One test in
//! its own process, as it changes the working directory.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, MemStorage, Options};
use halyard_server::keyspace::Keyspace;
use std::sync::Arc;

#[test]
fn open_on_writes_nothing_outside_the_store() {
    let cwd = tempfile::tempdir().unwrap();
    std::env::set_current_dir(cwd.path()).unwrap();
    let storage = Arc::new(MemStorage::new(21));
    let db = Arc::new(Db::open_on(storage.clone(), Options { direct_io: false, ..Options::default() }).unwrap());
    let ks = Keyspace::new(db.clone()).unwrap();
    {
        let _g = ks.lock(b"h");
        ks.hset_locked(b"h", &[(b"f", b"v")]).unwrap();
    }
    ks.set(b"k", b"v").unwrap();
    db.flush().unwrap();
    drop(ks);
    drop(db);
    let db = Arc::new(Db::open_on(storage, Options { direct_io: false, ..Options::default() }).unwrap());
    let ks = Keyspace::new(db).unwrap();
    assert_eq!(ks.hget(b"h", b"f").unwrap(), Some(b"v".to_vec()));
    let left: Vec<_> = std::fs::read_dir(cwd.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "files written into the working directory: {left:?}");
}
