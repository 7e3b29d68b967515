//! A single-node store's key-space bookkeeping files and the move from layout 1.
//!
//! `keyspace-layout` holds the layout new records are written in ("3"; "2" in stores written
//! before layout 3, whose hashes are rewritten one by one as they change, see `encoding`).
//! `keyspace-hashes` exists once a hash may exist. Both sit in the store's directory; a store on
//! storage without one (`Db::open_on`) keeps neither, so that nothing is ever written outside it.
//!
//! Layout 1 (`'k' | user` and `'f' | u32 BE len | user | field`) is moved to layout 2 when a
//! single-node store opens, in atomic batches that each move whole records, so a crash half-way
//! leaves every record readable in one layout or the other and the next open finishes. Records
//! move before fields; they move straight to layout 3 (hash headers rewritten, field names
//! escaped), as layout 1's fields never shared a key with their records.

use super::encoding::{all_keys, field_key, key, user_of, HASH, HASH_V2};
use halyard_engine::{Db, Error, ScanOptions, WriteBatch};
use std::ops::Bound;
use std::path::PathBuf;

const LAYOUT_FILE: &str = "keyspace-layout";
const HASHES_FILE: &str = "keyspace-hashes";
/// The layout a new store records.
const LAYOUT: &[u8] = b"3";

/// Opens the key space of a single-node store: moves layout 1 if the store holds it, records
/// the layout, and returns whether any hash may exist.
pub(super) fn open(db: &Db) -> Result<bool, Error> {
    let Some(dir) = marker_dir(db) else { return Ok(true) };
    if !dir.join(LAYOUT_FILE).exists() {
        migrate_v1(db)?;
        // A store that holds keys without the marker files came from elsewhere (a backup, a
        // checkpoint, a copy of the data files) or from layout 1: it may hold hashes.
        if db.scan_with(all_keys(), ScanOptions { reverse: false, limit: Some(1) }).next().is_some() {
            mark(db, HASHES_FILE)?;
        }
        write_durably(&dir, LAYOUT_FILE, LAYOUT)?;
    }
    Ok(dir.join(HASHES_FILE).exists())
}

/// Records that a hash may exist (no-op without a store directory).
pub(super) fn mark_hashes(db: &Db) -> Result<(), Error> {
    mark(db, HASHES_FILE)
}

/// The directory the bookkeeping files live in: the store's own, None when the store has none.
fn marker_dir(db: &Db) -> Option<PathBuf> {
    let p = db.path();
    (!p.as_os_str().is_empty()).then(|| p.to_path_buf())
}

fn mark(db: &Db, name: &str) -> Result<(), Error> {
    match marker_dir(db) {
        Some(dir) => write_durably(&dir, name, b""),
        None => Ok(()),
    }
}

/// Writes a small bookkeeping file durably (the file, then its directory).
fn write_durably(dir: &std::path::Path, name: &str, contents: &[u8]) -> Result<(), Error> {
    let io = |source: std::io::Error| Error::Io { context: "writing the key space's bookkeeping", source };
    let f = std::fs::File::create(dir.join(name)).map_err(io)?;
    std::io::Write::write_all(&mut &f, contents).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

/// Moves layout 1's records (`'k' | user`, `'f' | u32 len | user | field`) to layout 3, a
/// batch of whole records at a time (each batch atomic: no record is lost or doubled by a crash).
fn migrate_v1(db: &Db) -> Result<(), Error> {
    let mut moved = 0u64;
    for prefix in [b'k', b'f'] {
        loop {
            let range = (Bound::Included(vec![prefix]), Bound::Excluded(vec![prefix + 1]));
            let page: Vec<(Vec<u8>, Vec<u8>)> =
                db.scan_with(range, ScanOptions { reverse: false, limit: Some(1000) }).collect::<Result<_, _>>()?;
            if page.is_empty() {
                break;
            }
            let mut b = WriteBatch::new();
            for (k, mut v) in page {
                if let Some(new) = v1_to_v3(&k) {
                    if let Some(h) = v.first_mut().filter(|h| prefix == b'k' && **h == HASH_V2) {
                        *h = HASH;
                    }
                    b.put(new, v);
                }
                b.delete(k);
                moved += 1;
            }
            db.write(&b)?;
        }
    }
    if moved > 0 {
        tracing::info!("moved {moved} records of the Redis key space from layout 1 to layout 3");
        // Layout 1 marked hashes by their fields; any field moved means hashes may exist.
        if db
            .scan_with(all_keys(), ScanOptions { reverse: false, limit: None })
            .any(|r| r.ok().and_then(|(k, _)| user_of(&[super::encoding::PREFIX], &k)).is_some_and(|(_, own)| !own))
        {
            mark(db, HASHES_FILE)?;
        }
    }
    Ok(())
}

/// The layout-3 key of a layout-1 key; None for a malformed one (dropped).
fn v1_to_v3(k: &[u8]) -> Option<Vec<u8>> {
    match k.split_first()? {
        (b'k', user) => Some(key(user).to_vec()),
        (b'f', rest) => {
            let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
            let user = rest.get(4..4 + len)?;
            Some(field_key(&[super::encoding::PREFIX], user, rest.get(4 + len..)?, false))
        }
        _ => None,
    }
}
