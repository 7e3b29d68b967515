//! Rebuilding L0 after a restart: the L0 recovery log and the large log are replayed in
//! LSN order from the LSN covered by L1, up to the first gap (a gap-free prefix), and
//! atomic batches are applied whole or not at all.

use crate::aligned::AlignedBuf;
use crate::catalog::{Edit, RegionMeta};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::logtail::LogKind;
use crate::memtable::{Memtable, Value};
use crate::record::{self, KIND_DELETE};

struct Rec {
    lsn: u64,
    key: Vec<u8>,
    value: Value,
    batch_remaining: u32,
}

/// The replayed L0 table, the last recovered LSN, the edits that void whatever the logs hold
/// beyond it, and how many valid records beyond the recovered prefix were not replayed.
pub(crate) fn replay_counted(
    dev: &Device,
    meta: &RegionMeta,
    tolerate_damage: bool,
) -> Result<(Memtable, u64, Vec<Edit>, u64)> {
    let mem = Memtable::new();
    if meta.backup {
        return Ok((mem, meta.l1_lsn, Vec::new(), 0));
    }
    let mut recs = Vec::new();
    let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
    for kind in [LogKind::L0, LogKind::Large] {
        for s in &meta.logs[kind as usize] {
            let base = dev.seg_base(s.seg);
            dev.read_into(base, &mut img, kind.io())?;
            let (records, clean) = record::scan_checked(&img, s.salt);
            if !clean && !tolerate_damage {
                let end = records.last().map_or(0, |(o, r)| o + r.len);
                if record::any_valid_after(&img, end, s.salt, meta.l1_lsn + 1..=s.sealed) {
                    return Err(Error::corrupt(
                        s.seg as u64,
                        end as u64,
                        format!(
                            "damaged record in the {kind:?} log with intact records after it; opening would drop \
                             acknowledged writes. Set Options::tolerate_log_damage to open with the records before it"
                        ),
                    ));
                }
            }
            for (off, r) in records {
                if r.lsn <= meta.l1_lsn || r.lsn > s.sealed {
                    continue;
                }
                let value = match (kind, r.kind) {
                    (_, KIND_DELETE) => Value::Tombstone,
                    (LogKind::Large, _) => Value::Large { ptr: base + off as u64, len: r.len as u32, salt: s.salt },
                    _ => Value::Inline(r.value.to_vec()),
                };
                recs.push(Rec { lsn: r.lsn, key: r.key.to_vec(), value, batch_remaining: r.batch_remaining });
            }
        }
    }
    recs.sort_by_key(|r| r.lsn);
    let mut last = meta.l1_lsn;
    let mut pending: Vec<Rec> = Vec::new();
    let found = recs.len();
    let mut applied = 0;
    for (expect, r) in (meta.l1_lsn + 1..).zip(recs) {
        if r.lsn != expect || pending.last().is_some_and(|p| p.batch_remaining != r.batch_remaining + 1) {
            break;
        }
        let done = r.batch_remaining == 0;
        pending.push(r);
        if done {
            for p in pending.drain(..) {
                last = p.lsn;
                applied += 1;
                mem.insert(&p.key, p.lsn, p.value);
            }
        }
    }
    if applied < found {
        // Point-in-time recovery: the store holds every write up to the first gap. Records
        // beyond it were never acknowledged as durable (a torn tail under group commit), or
        // a record was damaged; say so either way.
        tracing::warn!(
            "recovery kept LSNs up to {last}; {} later log records were not replayed (a torn tail or a damaged record)",
            found - applied
        );
    }
    // No reader exists yet: the table keeps one version per key from the start.
    mem.remove_all_superseded();
    let mut seals = Vec::new();
    for kind in [LogKind::L0, LogKind::Large] {
        for s in &meta.logs[kind as usize] {
            if s.sealed == u64::MAX {
                seals.push(Edit::LogSeal { log: kind, seg: s.seg, max_lsn: last });
            }
        }
    }
    Ok((mem, last, seals, (found - applied) as u64))
}
