//! Rebuilding L0 after a restart: the L0 recovery log and the large log are replayed in
//! LSN order from the LSN covered by L1, up to the first gap (a gap-free prefix), and
//! atomic batches are applied whole or not at all.
//!
//! Only segments that can hold records beyond L1's LSN are read: a log's segments are read
//! newest first, down to the first one sealed at or below that LSN or whose first record is
//! at most one past it (records of a log are in LSN order, so older segments hold nothing
//! newer). Each log then continues in its last segment ([`Resume`]) instead of a new one, so
//! that restarts add no segments.

#![expect(clippy::indexing_slicing, reason = "positions within a segment image found by scanning that image")]

use crate::catalog::LogKind;
use crate::catalog::{Edit, LogSeg, RegionMeta};
use crate::device::aligned::{align_down, align_up, AlignedBuf, ALIGN};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::format::rangedel::RangeDel;
use crate::format::record::{self, KIND_DELETE, KIND_MARK, KIND_RANGE_DELETE};
use crate::tree::memtable::{Memtable, Value};

struct Rec {
    lsn: u64,
    key: Vec<u8>,
    value: Value,
    /// A range delete: the end of its range (`key` is the start).
    range_end: Option<Vec<u8>>,
    /// A mark: an LSN and no change ([`KIND_MARK`]).
    mark: bool,
    batch_remaining: u32,
}

/// Where a log continues after the restart: its last segment, as far as the recovered records
/// go. Bytes the device held beyond them (records past the recovered prefix) were zeroed, so
/// no later scan can mistake them for records appended after the restart.
pub(crate) struct Resume {
    pub kind: LogKind,
    pub seg: u32,
    pub salt: u32,
    /// The segment image: the recovered records, zeros after them.
    pub image: AlignedBuf,
    /// Bytes of the image that hold the recovered records.
    pub pos: usize,
}

/// What recovery rebuilt for one region.
pub(crate) struct Recovered {
    pub mem: Memtable,
    /// The last recovered LSN.
    pub last: u64,
    /// Seals that void whatever the logs hold beyond `last`, and the fill of segments whose
    /// fill was not known.
    pub edits: Vec<Edit>,
    /// Valid records beyond the recovered prefix that were not replayed.
    pub dropped: u64,
    pub resume: Vec<Resume>,
    /// Large-log bytes replayed (they count against the new table's bound on its large log).
    pub large_bytes: u64,
}

/// The last segment of a log, read whole, with the (offset, length, LSN) of its records.
struct Last {
    seg: LogSeg,
    image: AlignedBuf,
    records: Vec<(usize, usize, u64)>,
}

/// A segment read whose fill is not known yet: (segment, seal, its records).
type Unfilled = (u32, u64, Vec<(usize, usize, u64)>);

/// Reads the segments of `kind` that may hold records beyond `l1_lsn`, newest first, adding
/// their records to `recs`. Returns the log's last segment when it is not sealed (the tail
/// continues in it) and the other segments read whose fill is not known.
fn read_log(
    dev: &Device,
    meta: &RegionMeta,
    kind: LogKind,
    how: How,
    recs: &mut Vec<Rec>,
) -> Result<(Option<Last>, Vec<Unfilled>)> {
    let segs = meta.log(kind);
    let mut last = None;
    let mut fills = Vec::new();
    for (i, s) in segs.iter().enumerate().rev() {
        if s.sealed <= meta.l1_lsn && how != How::Promote {
            break;
        }
        let base = dev.seg_base(s.seg);
        let mut img = AlignedBuf::new(dev.seg_bytes() as usize);
        dev.read_into(base, &mut img, kind.io())?;
        let (records, clean) = record::scan_checked(&img, s.salt);
        if !clean && matches!(how, How::Open { tolerate_damage: false, .. }) {
            check_damage(&img, s, meta.l1_lsn, kind, &records)?;
        }
        let first = records.first().map(|(_, r)| r.lsn);
        // The tail continues in the last segment; a segment of unknown fill gets it recorded.
        let resumable = i + 1 == segs.len() && s.sealed == u64::MAX && matches!(how, How::Open { resume: true, .. });
        let unfilled = !resumable && s.fill.is_none() && kind == LogKind::Large;
        let kept: Vec<(usize, usize, u64)> =
            if resumable || unfilled { records.iter().map(|(o, r)| (*o, r.len, r.lsn)).collect() } else { Vec::new() };
        for (off, r) in records {
            if r.lsn <= meta.l1_lsn || r.lsn > s.sealed {
                continue;
            }
            let value = match (kind, r.kind) {
                (_, KIND_DELETE | KIND_RANGE_DELETE | KIND_MARK) => Value::Tombstone,
                (LogKind::Large, _) => Value::Large { ptr: base + off as u64, len: r.len as u32, salt: s.salt },
                _ => Value::Inline(r.value.to_vec()),
            };
            let value = Value::expiring(r.expire_at, value);
            let range_end = (r.kind == KIND_RANGE_DELETE).then(|| r.value.to_vec());
            let (lsn, key, batch_remaining) = (r.lsn, r.key.to_vec(), r.batch_remaining);
            let mark = r.kind == KIND_MARK;
            recs.push(Rec { lsn, key, value, range_end, mark, batch_remaining });
        }
        if resumable {
            last = Some(Last { seg: s.clone(), image: img, records: kept });
        } else if unfilled {
            fills.push((s.seg, s.sealed, kept));
        }
        if first.is_some_and(|f| f <= meta.l1_lsn + 1) && how != How::Promote {
            break;
        }
    }
    Ok((last, fills))
}

fn check_damage(
    img: &[u8],
    s: &LogSeg,
    l1_lsn: u64,
    kind: LogKind,
    records: &[(usize, record::Record<'_>)],
) -> Result<()> {
    let end = records.last().map_or(0, |(o, r)| o + r.len);
    if record::any_valid_after(img, end, s.salt, l1_lsn + 1..=s.sealed) {
        return Err(Error::corrupt(
            s.seg as u64,
            end as u64,
            format!(
                "damaged record in the {kind:?} log with intact records after it; opening would drop \
                 acknowledged writes. Set Options::tolerate_log_damage to open with the records before it"
            ),
        ));
    }
    Ok(())
}

/// Applies the gap-free prefix of `recs` (sorted by LSN) after `l1_lsn` to `mem`, whole
/// batches only. Returns the last applied LSN, the records applied and the large-log bytes.
fn apply_prefix(mem: &Memtable, recs: Vec<Rec>, l1_lsn: u64) -> (u64, usize, u64) {
    let mut last = l1_lsn;
    let mut pending: Vec<Rec> = Vec::new();
    let (mut applied, mut large) = (0, 0u64);
    for (expect, r) in (l1_lsn + 1..).zip(recs) {
        if r.lsn != expect || pending.last().is_some_and(|p| p.batch_remaining != r.batch_remaining + 1) {
            break;
        }
        let done = r.batch_remaining == 0;
        pending.push(r);
        if done {
            for p in pending.drain(..) {
                last = p.lsn;
                applied += 1;
                if let Value::Large { len, .. } = *p.value.base() {
                    large += len as u64;
                }
                match p.range_end {
                    _ if p.mark => mem.insert_mark(p.lsn),
                    Some(end) => mem.insert_range_del(RangeDel { start: p.key, end, lsn: p.lsn }),
                    None => mem.insert(&p.key, p.lsn, p.value),
                }
            }
        }
    }
    (last, applied, large)
}

/// Cuts a log's last segment back to the records up to `last` and zeroes on the device
/// whatever it held after them (nothing after a clean close); the caller syncs before the log
/// is appended to. Returns whether it wrote.
fn resume_at(dev: &Device, kind: LogKind, mut l: Last, last: u64) -> Result<(Resume, bool)> {
    let pos = record::end_through(l.records, last);
    let dirty = l.image[pos..].iter().rposition(|b| *b != 0).map(|p| align_up(pos + p + 1, ALIGN));
    l.image[pos..].fill(0);
    if let Some(end) = dirty {
        let from = align_down(pos, ALIGN);
        dev.write(dev.seg_base(l.seg.seg) + from as u64, &l.image[from..end], kind.io())?;
    }
    Ok((Resume { kind, seg: l.seg.seg, salt: l.seg.salt, image: l.image, pos }, dirty.is_some()))
}

/// Why a region's logs are replayed.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum How {
    /// Opening the store; with `tolerate_damage`, a damaged record with intact records after
    /// it ends the replay instead of failing the open; with `resume`, each log continues in
    /// its last segment.
    Open { tolerate_damage: bool, resume: bool },
    /// Promoting a backup: its logs were received from the primary, so every segment is read
    /// (nothing orders them but the primary's word) and every log starts in a new segment.
    Promote,
}

/// Replays a region's logs (see the module documentation).
pub(crate) fn replay(dev: &Device, meta: &RegionMeta, how: How) -> Result<Recovered> {
    let mem = Memtable::new();
    if meta.backup {
        let resume = Vec::new();
        return Ok(Recovered { mem, last: meta.l1_lsn, edits: Vec::new(), dropped: 0, resume, large_bytes: 0 });
    }
    let mut recs = Vec::new();
    let mut lasts = Vec::new();
    let mut unfilled = Vec::new();
    for kind in [LogKind::L0, LogKind::Large] {
        let (last, fills) = read_log(dev, meta, kind, how, &mut recs)?;
        lasts.push((kind, last));
        unfilled.extend(fills);
    }
    recs.sort_by_key(|r| r.lsn);
    let found = recs.len();
    let (last, applied, large_bytes) = apply_prefix(&mem, recs, meta.l1_lsn);
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
    let mut resume = Vec::new();
    let mut wrote = false;
    for (kind, l) in lasts {
        if let Some(l) = l {
            let (r, w) = resume_at(dev, kind, l, last)?;
            resume.push(r);
            wrote |= w;
        }
    }
    if wrote {
        dev.sync()?;
    }
    let mut edits: Vec<Edit> = unfilled
        .into_iter()
        .map(|(seg, sealed, recs)| Edit::LogFill {
            log: LogKind::Large,
            seg,
            bytes: record::end_through(recs, sealed.min(last)) as u32,
        })
        .collect();
    // Every segment that may hold records beyond `last` is sealed at it, also one the tail
    // left with a higher seal before the crash: new writes reuse those LSNs.
    for kind in [LogKind::L0, LogKind::Large] {
        for s in meta.log(kind) {
            if s.sealed > last && !resume.iter().any(|r| r.seg == s.seg) {
                edits.push(Edit::LogSeal { log: kind, seg: s.seg, max_lsn: last });
            }
        }
    }
    let dropped = (found - applied) as u64;
    Ok(Recovered { mem, last, edits, dropped, resume, large_bytes })
}
