//! The workload that writes the committed format fixtures (`tests/fixtures/format-N.tar.gz`,
//! made by `scripts/make-fixture.sh`) and the contents a reader of them must find. Shared by the
//! `make_fixture` example and `tests/format.rs`, so both sides agree by construction.

use halyard_engine::{Db, Options, WriteBatch};
use std::collections::BTreeMap;
use std::path::Path;

/// Options of the fixture store: small segments so that the archive stays small.
pub fn options() -> Options {
    Options {
        segment_bytes: 64 << 10,
        node_bytes: 4 << 10,
        l0_bytes: 256 << 10,
        data_files: 2,
        log_chunk_bytes: 16 << 10,
        ..Options::default()
    }
}

/// Where the fixture's only region is split after round 0 (format 5 on): past every key.
pub const SPLIT_AT: &[u8] = b"zz";

/// Reopen rounds after the first one, each writing a little: the store a format-1 build leaves
/// holds one partly filled large-log segment per round.
pub const ROUNDS: u32 = 24;

fn value(round: u32, i: u32, len: usize) -> Vec<u8> {
    let mut v = format!("r{round}i{i}:").into_bytes();
    v.resize(len, b'a' + ((round + i) % 26) as u8);
    v
}

/// Round `round`'s writes: (key, Some(value)) puts and (key, None) deletes, in order.
pub fn writes(round: u32) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let mut out = Vec::new();
    if round == 0 {
        // Small, medium and large pairs, flushed to L1 (SSTs and a medium log).
        for i in 0..300u32 {
            let len = [16usize, 300, 2000][(i % 3) as usize];
            out.push((format!("base{i:04}").into_bytes(), Some(value(0, i, len))));
        }
        return out;
    }
    for i in 0..10u32 {
        out.push((format!("large{:04}", (round * 10 + i) % 120).into_bytes(), Some(value(round, i, 2000))));
        out.push((format!("small{:04}", (round * 7 + i) % 50).into_bytes(), Some(value(round, i, 20))));
    }
    out.push((format!("base{:04}", round * 11 % 300).into_bytes(), None));
    out
}

/// What the store holds after rounds `0..=last`.
pub fn expected(last: u32) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for round in 0..=last {
        for (k, v) in writes(round) {
            match v {
                Some(v) => m.insert(k, v),
                None => m.remove(&k),
            };
        }
    }
    m
}

/// The expiry time (ms since the Unix epoch, in 2100) that an odd round's puts of small
/// pairs carry since format 3: they read back as any other pair, with this expiry.
pub const EXPIRES_AT: u64 = 4_102_444_800_000;

/// Writes round `round` in batches of 7 (atomic batches span both logs).
pub fn write_round(db: &Db, round: u32) -> halyard_engine::Result<()> {
    for chunk in writes(round).chunks(7) {
        let mut b = WriteBatch::new();
        for (k, v) in chunk {
            match v {
                Some(v) if round % 2 == 1 && k.starts_with(b"small") => {
                    b.put_expiring(k.clone(), v.clone(), EXPIRES_AT)
                }
                Some(v) => b.put(k.clone(), v.clone()),
                None => b.delete(k.clone()),
            };
        }
        db.write(&b)?;
    }
    // Since format 4: pairs that a range delete removes again, in round 0 (into the catalog
    // with the flush) and every fourth round (the last of them stays in the L0 log). They are
    // not in `expected`, which older fixtures, written without them, match as well.
    if round % 4 == 3 || round == 0 {
        let prefix = format!("gone{round:02}");
        for i in 0..12u32 {
            let len = [16usize, 300, 2000][(i % 3) as usize];
            db.put(format!("{prefix}-{i:03}").as_bytes(), &value(round, i, len))?;
        }
        db.delete_range(prefix.as_bytes(), format!("{prefix}~").as_bytes())?;
    }
    Ok(())
}

/// Makes the fixture store in `dir`: round 0 then a flush, then `ROUNDS` reopen rounds.
pub fn make(dir: &Path) -> halyard_engine::Result<()> {
    {
        let db = Db::open(dir, options())?;
        write_round(&db, 0)?;
        db.flush()?;
        // Since format 5: two regions that share round 0's SSTs and logs (a split past every
        // key, so that the workload's batches stay in one region).
        db.split_region(0, SPLIT_AT, 1)?;
        // Since format 6: a region dropped (split off past every key, made a backup copy,
        // dropped: the record that removes a region is in the redo log).
        db.split_region(1, b"zzz", 2)?;
        db.replication().demote_to_backup(2)?;
        db.replication().drop_backup_region(2)?;
    }
    for round in 1..=ROUNDS {
        let db = Db::open(dir, options())?;
        write_round(&db, round)?;
    }
    Ok(())
}
