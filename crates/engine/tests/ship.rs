//! The replication hooks, end to end inside one process (docs/design.md §3): a primary's log
//! appends, seals, compaction output and edits are applied to backup stores exactly as a
//! backup's receive path would; a backup restarts mid-stream; one backup is promoted with its
//! unflushed buffers, the other remaps to it and follows; and the copies read back like the
//! primary. Torn buffers are cut at every byte offset of a record.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{
    CopyImage, Db, Edit, Error, Inventory, LogKind, Options, ShipListener, ShippedSegment, SstInfo, TailImage,
};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
enum Event {
    Append { log: LogKind, seg: u32, salt: u32, offset: u32, bytes: Vec<u8> },
    Sealed { log: LogKind, seg: u32, salt: u32 },
    Sst(SstInfo, Vec<u8>),
    Medium(u32, u32, Vec<u8>),
    Edits(Vec<Edit>),
    Split { at: Vec<u8>, lsn: u64, child: u32 },
}

/// What a primary shipped, with the region of each event, in the order it happened.
#[derive(Default)]
struct Recorder(Mutex<Vec<(u32, Event)>>);

impl Recorder {
    /// The events of a primary with one region.
    fn take(&self) -> Vec<Event> {
        self.take_tagged().into_iter().map(|(_, e)| e).collect()
    }
    fn take_tagged(&self) -> Vec<(u32, Event)> {
        std::mem::take(&mut *self.0.lock().expect("lock"))
    }
    fn push(&self, region: u32, ev: Event) {
        self.0.lock().expect("lock").push((region, ev));
    }
}

impl ShipListener for Recorder {
    fn log_append(&self, region: u32, log: LogKind, seg: u32, salt: u32, offset: u32, bytes: &[u8], _: u64) {
        self.push(region, Event::Append { log, seg, salt, offset, bytes: bytes.to_vec() });
    }
    fn log_sealed(&self, region: u32, log: LogKind, seg: u32, salt: u32) {
        self.push(region, Event::Sealed { log, seg, salt });
    }
    fn segment(&self, region: u32, seg: ShippedSegment<'_>) {
        let ev = match seg {
            ShippedSegment::Sst { info, bytes } => Event::Sst(info.clone(), bytes.to_vec()),
            ShippedSegment::MediumRun { seg, salt, bytes } => Event::Medium(seg, salt, bytes.to_vec()),
        };
        self.push(region, ev);
    }
    fn edits(&self, region: u32, edits: &[Edit]) {
        self.push(region, Event::Edits(edits.to_vec()));
    }
    fn split(&self, region: u32, at: &[u8], lsn: u64, child: u32) {
        self.push(region, Event::Split { at: at.to_vec(), lsn, child });
    }
}

/// What a backup's receive path keeps: one buffer per log, written at the primary's offsets.
#[derive(Default, Clone)]
struct Buffers(HashMap<LogKind, (u32, u32, Vec<u8>)>);

impl Buffers {
    fn apply(&mut self, db: &Db, ev: &Event) {
        self.apply_to(db, 0, ev);
    }

    fn apply_to(&mut self, db: &Db, region: u32, ev: &Event) {
        match ev {
            Event::Append { log, seg, salt, offset, bytes } => {
                let b = self.0.entry(*log).or_insert((*seg, *salt, Vec::new()));
                if (b.0, b.1) != (*seg, *salt) {
                    *b = (*seg, *salt, Vec::new());
                }
                let end = *offset as usize + bytes.len();
                if b.2.len() < end {
                    b.2.resize(end, 0);
                }
                b.2[*offset as usize..end].copy_from_slice(bytes);
            }
            Event::Sealed { log, seg, salt } => {
                let bytes = match self.0.remove(log) {
                    Some((s, t, b)) if (s, t) == (*seg, *salt) => b,
                    _ => Vec::new(),
                };
                db.replication().backup_log_segment(region, *log, *seg, *salt, &bytes).expect("flush");
            }
            Event::Sst(info, bytes) => {
                db.replication().backup_sst(region, info, bytes).expect("sst");
            }
            Event::Medium(seg, salt, bytes) => {
                db.replication().backup_medium_run(region, *seg, *salt, bytes).expect("medium run");
            }
            Event::Edits(e) => db.replication().backup_edits(region, e).expect("edits"),
            Event::Split { at, lsn, child } => {
                db.replication().backup_split(region, at, *lsn, *child).expect("split");
            }
        }
    }

    fn tails(&self) -> Vec<TailImage<'_>> {
        self.0.iter().map(|(log, (s, t, b))| TailImage { log: *log, primary: *s, salt: *t, bytes: b }).collect()
    }

    /// Stores every buffer as a segment (a backup whose primary changed).
    fn flush_all(&mut self, db: &Db) {
        for (log, (s, t, b)) in self.0.drain() {
            db.replication().backup_log_segment(0, log, s, t, &b).expect("flush");
        }
    }
}

/// The events a full copy of the region consists of (what catch-up ships to a new backup),
/// read from the primary's device now, whatever the region did since the capture.
fn copy_events(copy: halyard_engine::RegionCopy) -> Vec<Event> {
    let mut evs = Vec::new();
    for i in 0..copy.pieces() {
        match copy.read(i).expect("read a piece of the copy") {
            CopyImage::Log(LogKind::Medium, seg, salt, _, bytes) => evs.push(Event::Medium(seg, salt, bytes)),
            CopyImage::Log(log, seg, salt, tail, bytes) => {
                evs.push(Event::Append { log, seg, salt, offset: 0, bytes });
                if !tail {
                    evs.push(Event::Sealed { log, seg, salt });
                }
            }
            CopyImage::Sst(info, bytes) => evs.push(Event::Sst(info, bytes)),
            CopyImage::Held { .. } => panic!("a full copy holds no kept piece"),
            CopyImage::Named { .. } => panic!("a store on local files names no segment"),
        }
    }
    evs.push(Event::Edits(copy.edits().to_vec()));
    evs
}

/// Applies an incremental copy for a backup that reported `inv` to `db`; returns the bytes
/// (sent, kept).
fn apply_incremental(db: &Db, copy: halyard_engine::RegionCopy, inv: &Inventory, bufs: &mut Buffers) -> (u64, u64) {
    apply_pieces(db, copy, inv, bufs, usize::MAX)
}

/// [`apply_incremental`], interrupted after `upto` pieces (no last edits) when there are more.
fn apply_pieces(
    db: &Db,
    mut copy: halyard_engine::RegionCopy,
    inv: &Inventory,
    bufs: &mut Buffers,
    upto: usize,
) -> (u64, u64) {
    let keep = copy.resync(inv);
    db.replication().resync_backup(0, &keep).expect("resync");
    let (sent, kept) = apply_copy_pieces(db, &copy, bufs, upto);
    if upto >= copy.pieces() {
        bufs.apply(db, &Event::Edits(copy.edits().to_vec()));
    }
    (sent, kept)
}

/// The primary's L0 tables cut into Dranges: backups keep no L0, so they see only the merges.
fn opts() -> Options {
    Options { gc_threshold: 0.2, dranges: 4, ..Options::tiny() }
}

fn backup_opts() -> Options {
    Options { default_region: false, ..opts() }
}

fn kv(i: u32, round: u32) -> (Vec<u8>, Vec<u8>) {
    let k = format!("user{:06}", (i * 7919) % 3000).into_bytes();
    let len = [5usize, 20, 80, 150, 300, 900][((i + round) % 6) as usize];
    let mut v = format!("{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    (k, v)
}

/// Writes a round of puts and deletes; returns the model.
fn write_round(db: &Db, round: u32, model: &mut BTreeMap<Vec<u8>, Vec<u8>>) {
    for i in 0..3000 {
        let (k, v) = kv(i, round);
        if (i + round).is_multiple_of(11) {
            db.delete(&k).expect("delete");
            model.remove(&k);
        } else {
            db.put(&k, &v).expect("put");
            model.insert(k, v);
        }
        // A range delete now and then: shipped as a log record, then as the catalog's range
        // deletes once compacted; each copy must drop the same keys.
        if i % 1000 == 500 {
            let (lo, hi) = (format!("user{:06}", i - 200 + round * 37), format!("user{:06}", i + round * 37));
            db.delete_range(lo.as_bytes(), hi.as_bytes()).expect("delete range");
            let gone: Vec<Vec<u8>> = model.range(lo.into_bytes()..hi.into_bytes()).map(|(k, _)| k.clone()).collect();
            for k in gone {
                model.remove(&k);
            }
        }
    }
}

fn contents(db: &Db) -> Vec<(Vec<u8>, Vec<u8>)> {
    db.scan(..).map(|r| r.expect("scan")).collect()
}

fn assert_same(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>, who: &str) {
    let got = contents(db);
    let want: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got.len(), want.len(), "{who}: number of keys");
    assert!(got == want, "{who}: contents differ from the model");
    for (k, v) in model.iter().take(500) {
        assert_eq!(db.get(k).expect("get").as_ref(), Some(v), "{who}: get");
    }
}

/// Waits until the primary's background compactions and GC stop; returns its stats.
fn settle(db: &Db) -> halyard_engine::Stats {
    loop {
        let before = db.stats();
        std::thread::sleep(std::time::Duration::from_millis(150));
        let s = db.stats();
        if s.compactions == before.compactions
            && s.gc_segments == before.gc_segments
            && s.gc_bytes_moved == before.gc_bytes_moved
        {
            return s;
        }
    }
}

fn open_backup(dir: &Path, create: bool) -> Db {
    let db = Db::open(dir, backup_opts()).expect("backup");
    if create {
        db.replication().create_backup_region(0, b"", None).expect("backup region");
    }
    db
}

#[test]
fn backups_follow_restart_promote_and_remap() {
    let root = tempfile::tempdir().expect("tempdir");
    let (pdir, b1dir, b2dir) = (root.path().join("p"), root.path().join("b1"), root.path().join("b2"));
    let primary = Db::open(&pdir, opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let mut b1 = open_backup(&b1dir, true);
    let b2 = open_backup(&b2dir, true);
    assert!(matches!(b1.put(b"x", b"y"), Err(Error::BackupRegion(0))));
    let (mut buf1, mut buf2, mut buf3) = (Buffers::default(), Buffers::default(), Buffers::default());
    let b3dir = root.path().join("b3");
    let mut b3: Option<Db> = None;
    let mut model = BTreeMap::new();
    let (mut ssts, mut runs, mut edits, mut seals) = (0, 0, 0, 0);
    for round in 0..6 {
        write_round(&primary, round, &mut model);
        if round == 3 {
            primary.compact().expect("compact");
            primary.gc().expect("gc");
        }
        if round == 3 {
            // A new backup joins mid-run (compactions and GC running): a full copy taken
            // atomically with the stream position, then the live stream.
            let db3 = open_backup(&b3dir, true);
            db3.replication().backup_log_segment(0, LogKind::L0, 999, 1, b"stale").expect("stale state");
            db3.replication().reset_backup(0).expect("reset");
            let (before, copy) = primary.replication().with_copy(0, |c| (rec.take(), c)).expect("copy");
            for ev in before {
                buf1.apply(&b1, &ev);
                buf2.apply(&b2, &ev);
            }
            // The region goes on (writes, a compaction, GC) before the copy's segments are
            // read: the copy's pin keeps them from being reused meanwhile.
            write_round(&primary, 40 + round, &mut model);
            primary.compact().expect("compact");
            primary.gc().expect("gc");
            for ev in &copy_events(copy) {
                buf3.apply(&db3, ev);
            }
            b3 = Some(db3);
        }
        for ev in rec.take() {
            if let Some(db3) = &b3 {
                buf3.apply(db3, &ev);
            }
            match &ev {
                Event::Sst(..) => ssts += 1,
                Event::Medium(..) => runs += 1,
                Event::Edits(..) => edits += 1,
                Event::Sealed { .. } => seals += 1,
                Event::Append { .. } | Event::Split { .. } => {}
            }
            buf1.apply(&b1, &ev);
            buf2.apply(&b2, &ev);
        }
        if round == 2 {
            // A backup restart between compactions (what it received of a compaction still
            // running would be lost and shipped again by catch-up): the maps come back from
            // its catalog.
            settle(&primary);
            for ev in rec.take() {
                buf1.apply(&b1, &ev);
                buf2.apply(&b2, &ev);
            }
            let before = b1.replication().replica_maps(0).expect("maps");
            assert!(!before.log.is_empty() && !before.index.is_empty(), "maps {before:?}");
            drop(b1);
            b1 = open_backup(&b1dir, false);
            assert_eq!(b1.replication().replica_maps(0).expect("maps"), before, "maps survive a restart");
        }
    }
    assert!(ssts > 10 && runs > 0 && edits > 10 && seals > 10, "ssts {ssts} runs {runs} edits {edits} seals {seals}");
    primary.compact().expect("compact");
    let pstats = settle(&primary);
    let b3 = b3.expect("third backup");
    for ev in rec.take() {
        buf1.apply(&b1, &ev);
        buf2.apply(&b2, &ev);
        buf3.apply(&b3, &ev);
    }
    assert_eq!(
        b3.stats().levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        pstats.levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        "the backup that joined late holds the same levels"
    );
    let b3dir_copy = root.path().join("b3-promoted");
    drop(b3);
    std::fs::create_dir_all(&b3dir_copy).expect("mkdir");
    copy_store(&b3dir, &b3dir_copy);
    let b3 = open_backup(&b3dir_copy, false);
    b3.replication().promote(0, &buf3.tails()).expect("promote the late backup");
    assert_same(&b3, &model, "late backup promoted");
    drop(b3);
    assert!(pstats.gc_segments > 0, "GC reclaimed large-log segments on the primary: {pstats:?}");
    let bstats = b1.stats();
    assert_eq!(bstats.compactions, 0, "a backup never compacts");
    assert_eq!(
        bstats.levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        pstats.levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        "the backup's levels hold what the primary's hold"
    );
    assert!(bstats.read_bytes_by.iter().all(|(k, b)| *k == "catalog" || *b < 64 << 10), "{:?}", bstats.read_bytes_by);
    // The primary is lost; backup 1 takes over with what it holds, unflushed buffers included.
    drop(primary);
    let p = b1.replication().promote(0, &buf1.tails()).expect("promote");
    assert_eq!(p.dropped_records, 0);
    assert_same(&b1, &model, "promoted backup");
    // Backup 2 stores its buffers and re-keys its maps to the new primary's segments.
    buf2.flush_all(&b2);
    // A backup taken from a backup node (the primary plays no part) restores into a store whose
    // region, once promoted, holds everything the backup node held.
    let (bk, restored) = (root.path().join("bk"), root.path().join("restored"));
    let report = b2.backup(&bk).expect("backup of a backup node");
    assert!(report.bytes_copied > 0, "{report:?}");
    halyard_engine::restore(&bk, None, &restored).expect("restore");
    let copy = open_backup(&restored, false);
    copy.replication().promote(0, &[]).expect("promote the restored copy");
    assert_same(&copy, &model, "restored backup of a backup node");
    drop(copy);
    b2.replication().remap(0, &b1.replication().replica_maps(0).expect("maps")).expect("remap");
    let digest = b1.replication().levels_digest(0).expect("digest");
    assert!(digest.is_some(), "a primary's levels always have a digest");
    assert_eq!(b2.replication().levels_digest(0).expect("digest"), digest, "remapped levels match the new primary's");
    let rec2 = Arc::new(Recorder::default());
    b1.replication().set_ship_listener(Some(rec2.clone()));
    let mut buf2 = Buffers::default();
    for round in 6..9 {
        write_round(&b1, round, &mut model);
        if round == 7 {
            b1.compact().expect("compact");
            b1.gc().expect("gc");
        }
        for ev in rec2.take() {
            buf2.apply(&b2, &ev);
        }
    }
    assert_same(&b1, &model, "new primary");
    drop(b1);
    let b2 = {
        drop(b2);
        open_backup(&b2dir, false)
    };
    b2.replication().promote(0, &buf2.tails()).expect("promote backup 2");
    assert_same(&b2, &model, "second promotion");
    // L0 logs were trimmed as the primaries compacted: only recent segments remain.
    assert!(b2.replication().log_segments(0, LogKind::L0).expect("l0 log").len() < 20);
}

/// A primary shipping to a recorder, two empty backups with their receive buffers, and the
/// model of what the primary holds.
struct Trio {
    primary: Db,
    rec: Arc<Recorder>,
    b1: Db,
    b2: Db,
    buf1: Buffers,
    buf2: Buffers,
    model: BTreeMap<Vec<u8>, Vec<u8>>,
}

/// A [`Trio`] under `root` whose primary wrote `rounds` rounds (not yet applied to the backups).
fn trio(root: &Path, rounds: u32) -> Trio {
    let primary = Db::open(root.join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let (b1, b2) = (open_backup(&root.join("b1"), true), open_backup(&root.join("b2"), true));
    let mut model = BTreeMap::new();
    for round in 0..rounds {
        write_round(&primary, round, &mut model);
    }
    Trio { primary, rec, b1, b2, buf1: Buffers::default(), buf2: Buffers::default(), model }
}

/// A [`Trio`] whose primary compacted with both backups following, then wrote a round and
/// merged again by `merge`; the events of that round and merge are returned, not yet applied.
fn trio_before_a_last_merge(root: &Path, merge: impl Fn(&Db)) -> (Trio, Vec<Event>) {
    let mut t = trio(root, 3);
    t.primary.compact().expect("compact");
    settle(&t.primary);
    for ev in t.rec.take() {
        t.buf1.apply(&t.b1, &ev);
        t.buf2.apply(&t.b2, &ev);
    }
    write_round(&t.primary, 3, &mut t.model);
    merge(&t.primary);
    settle(&t.primary);
    let last = t.rec.take();
    (t, last)
}

/// The old primary ships a compaction to one backup only before it dies: once the other backup
/// remaps to the promoted one, its levels digest differs (the replica then asks for an
/// incremental copy, which aligns it).
#[test]
fn a_backup_that_missed_an_edit_differs_from_the_new_primary_after_remap() {
    let root = tempfile::tempdir().expect("tempdir");
    let (Trio { primary, b1, b2, mut buf1, mut buf2, model, .. }, last) =
        trio_before_a_last_merge(root.path(), |p| p.compact().expect("compact"));
    let edits = last.iter().filter(|e| matches!(e, Event::Edits(_))).count();
    assert!(edits > 0, "the last compaction shipped edits");
    // Backup 2 gets the writes but none of the last compaction's output or edits.
    for ev in &last {
        buf1.apply(&b1, ev);
        if matches!(ev, Event::Append { .. } | Event::Sealed { .. }) {
            buf2.apply(&b2, ev);
        }
    }
    drop(primary);
    b1.replication().promote(0, &buf1.tails()).expect("promote");
    assert_same(&b1, &model, "promoted backup");
    buf2.flush_all(&b2);
    b2.replication().remap(0, &b1.replication().replica_maps(0).expect("maps")).expect("remap");
    let (ours, theirs) =
        (b2.replication().levels_digest(0).expect("digest"), b1.replication().levels_digest(0).expect("digest"));
    assert!(theirs.is_some());
    assert_ne!(ours, theirs, "a backup that missed an edit must not pass for aligned");
}

/// A backup that took a compaction the promoted one missed is emptied for a full copy from the
/// new primary: the copy's L1 LSN (lower than the compaction's) must be the backup's, or its
/// promotion replays the log only past the compaction it no longer holds and loses what that
/// compaction wrote out (found by etcd_moves: a moved-away primary's handoff flush reached the
/// other backup but not the new primary).
#[test]
fn a_full_copy_replaces_the_l1_lsn_of_a_compaction_the_new_primary_never_had() {
    let root = tempfile::tempdir().expect("tempdir");
    let (Trio { primary, b1, b2, mut buf1, mut buf2, model, .. }, last) =
        trio_before_a_last_merge(root.path(), |p| p.flush().expect("flush"));
    // Backup 2 gets the writes and the flush's L0->L1 merge; backup 1 only the writes.
    for ev in last {
        buf2.apply(&b2, &ev);
        if matches!(ev, Event::Append { .. } | Event::Sealed { .. }) {
            buf1.apply(&b1, &ev);
        }
    }
    drop(primary);
    b1.replication().promote(0, &buf1.tails()).expect("promote");
    assert_same(&b1, &model, "promoted backup");
    b2.replication().reset_backup(0).expect("reset");
    for ev in &b1.replication().with_copy(0, |c| c).map(copy_events).expect("copy") {
        buf2.apply(&b2, ev);
    }
    buf2.flush_all(&b2);
    b2.replication().promote(0, &buf2.tails()).expect("promote backup 2");
    assert_same(&b2, &model, "backup 2 after a full copy from the new primary");
}

/// A handoff's flush returns the LSN of a mark the log ships after the merge's edits: a backup
/// that acknowledged that LSN holds the merge, so the new primary starts from its L1 and the
/// other backups' levels match its own.
#[test]
fn a_handoff_flush_ships_its_merge_before_the_mark_it_returns() {
    let root = tempfile::tempdir().expect("tempdir");
    let Trio { primary, rec, .. } = trio(root.path(), 2);
    settle(&primary);
    rec.take();
    for i in 0..500u32 {
        primary.put(format!("late{i:05}").as_bytes(), b"v").expect("put");
    }
    let mark = primary.region(0).expect("region").flush().expect("flush");
    let events = rec.take();
    let merged =
        events.iter().rposition(|e| matches!(e, Event::Edits(ed) if ed.iter().any(|x| matches!(x, Edit::L1Lsn(_)))));
    let merged = merged.expect("the flush shipped its merge's edits");
    let l1 = events[merged].clone();
    let Event::Edits(ed) = l1 else { unreachable!() };
    let l1_lsn = ed.iter().find_map(|x| if let Edit::L1Lsn(l) = x { Some(*l) } else { None }).expect("L1Lsn");
    assert!(mark > l1_lsn, "the mark ({mark}) comes after what the merge covers ({l1_lsn})");
    assert!(
        events[merged..].iter().any(|e| matches!(e, Event::Append { log: LogKind::L0, .. })),
        "the mark's record is shipped after the merge's edits"
    );
}

#[test]
fn torn_buffer_at_every_offset_of_a_record() {
    let root = tempfile::tempdir().expect("tempdir");
    let (pdir, bdir) = (root.path().join("p"), root.path().join("b"));
    let primary = Db::open(&pdir, Options { l0_bytes: 1 << 20, ..opts() }).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let backup = open_backup(&bdir, true);
    let mut buf = Buffers::default();
    for i in 0..40u32 {
        primary.put(format!("k{i:03}").as_bytes(), format!("v{i}").as_bytes()).expect("put");
    }
    let mut batch = halyard_engine::WriteBatch::new();
    batch.put(b"b1".to_vec(), b"x".to_vec()).put(b"b2".to_vec(), b"y".to_vec());
    primary.write(&batch).expect("batch");
    primary.put(b"last", b"value").expect("put");
    for ev in rec.take() {
        buf.apply(&backup, &ev);
    }
    drop(backup);
    let (seg, salt, bytes) = buf.0.get(&LogKind::L0).cloned().expect("an L0 buffer");
    let len = bytes.len();
    // The last record ("last") and the batch before it (two records).
    let rec_len = |k: &str, v: &str| k.len() + v.len() + halyard_engine::RECORD_OVERHEAD;
    let last_start = len - rec_len("last", "value");
    let batch_start = last_start - rec_len("b1", "x") - rec_len("b2", "y");
    let mut checked = 0;
    for cut in batch_start..=len {
        let copy = root.path().join(format!("cut{cut}"));
        std::fs::create_dir_all(&copy).expect("mkdir");
        copy_store(&bdir, &copy);
        let db = open_backup(&copy, false);
        let tail = TailImage { log: LogKind::L0, primary: seg, salt, bytes: &bytes[..cut] };
        db.replication().promote(0, &[tail]).expect("promote");
        let has = |k: &[u8]| db.get(k).expect("get").is_some();
        assert!(has(b"k039"), "cut {cut}: records before the torn one survive");
        let batch_whole = cut >= last_start;
        assert_eq!(has(b"b1"), batch_whole, "cut {cut}: a batch is whole or absent");
        assert_eq!(has(b"b2"), batch_whole, "cut {cut}: a batch is whole or absent");
        assert_eq!(has(b"last"), cut == len, "cut {cut}: a torn record is not replayed");
        // The promoted region takes writes.
        db.put(b"after", b"promotion").expect("write after promotion");
        drop(db);
        std::fs::remove_dir_all(&copy).expect("rm");
        checked += 1;
    }
    assert!(checked > 60);
}

/// A region that took writes of its own (a Build-Index backup that replays and compacts) is
/// emptied and made a backup region, takes a full copy of another store's region through the
/// shipping path, and becomes a plain region again with exactly the copy's contents — even
/// though its own L1 LSN was ahead of the copy's — which then takes writes and survives a reopen.
#[test]
fn region_with_its_own_history_is_demoted_and_takes_a_full_copy() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let mut model = BTreeMap::new();
    for round in 0..2 {
        write_round(&primary, round, &mut model);
    }
    primary.compact().expect("compact");
    write_round(&primary, 2, &mut model);
    settle(&primary);
    let dir = root.path().join("c");
    let copy = Db::open(&dir, opts()).expect("copy");
    let mut own = BTreeMap::new();
    for round in 10..16 {
        write_round(&copy, round, &mut own);
    }
    copy.compact().expect("compact");
    settle(&copy);
    assert!(copy.region(0).expect("r").lsn() > primary.region(0).expect("r").lsn());
    let allocated = copy.stats().space_allocated_bytes;
    copy.replication().demote_to_backup(0).expect("demote");
    assert!(matches!(copy.put(b"x", b"y"), Err(Error::BackupRegion(0))));
    assert!(copy.scan(..).next().is_none(), "a demoted region is empty");
    let snap = primary.replication().with_copy(0, |c| c).map(copy_events).expect("copy");
    let mut bufs = Buffers::default();
    for ev in &snap {
        bufs.apply(&copy, ev);
    }
    let p = copy.replication().promote(0, &bufs.tails()).expect("promote");
    assert_eq!(p.last_lsn, primary.region(0).expect("r").lsn());
    assert_same(&copy, &model, "after the copy");
    // Its own segments were given back (kept, it would hold both histories).
    let (now, theirs) = (copy.stats().space_allocated_bytes, primary.stats().space_allocated_bytes);
    assert!(now < allocated + theirs, "{now} bytes allocated after the copy; {allocated} before, {theirs} copied");
    write_round(&copy, 20, &mut model);
    copy.compact().expect("compact");
    settle(&copy);
    assert_same(&copy, &model, "after writes of its own");
    drop(copy);
    let copy = Db::open(&dir, opts()).expect("reopen");
    assert_same(&copy, &model, "after a reopen");
}

/// Copies a closed store's data files into `to` (a directory that exists).
fn copy_store(from: &Path, to: &Path) {
    for f in halyard_engine::data_files(from) {
        std::fs::copy(&f, to.join(f.file_name().expect("a file name"))).expect("copy a data file");
    }
}

/// A backup that restarts while its primary goes on takes back only what it lacks: the
/// segments and SSTs it holds identically stay (reported in its inventory), the rest is
/// copied; it then follows the live stream and, promoted, holds what the primary holds. A
/// segment whose records differ from the backup's is sent again.
#[test]
fn a_returning_backup_takes_only_what_it_lacks() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let bdir = root.path().join("b");
    let mut b = open_backup(&bdir, true);
    let mut model = BTreeMap::new();
    let mut bufs = Buffers::default();
    for round in 0..4 {
        write_round(&primary, round, &mut model);
        if round == 2 {
            primary.compact().expect("compact");
        }
        settle(&primary);
        for ev in rec.take() {
            bufs.apply(&b, &ev);
        }
    }
    // The backup stops (its buffers are gone) while the primary takes writes, compacts and
    // collects garbage.
    drop(b);
    for i in 0..300u32 {
        let (k, v) = (format!("away{i:05}").into_bytes(), vec![b'w'; 40 + (i as usize % 7) * 60]);
        primary.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    settle(&primary);
    rec.take();
    b = open_backup(&bdir, false);
    let inv = b.replication().backup_inventory(0).expect("inventory");
    assert!(inv.logs.len() > 2 && inv.ssts.len() > 2, "{inv:?}");
    // A digest that does not match: that segment travels again.
    let mut wrong = inv.clone();
    wrong.logs[0].2 ^= 1;
    let (total, sent_wrong) = primary
        .replication()
        .with_copy(0, |mut c| {
            c.resync(&wrong);
            let held = (0..c.pieces())
                .filter(|i| matches!(c.read(*i).expect("read"), CopyImage::Held { log: Some((_, seg, salt)), .. } if (seg, salt) == (wrong.logs[0].0, wrong.logs[0].1)))
                .count();
            (c.total_bytes(), held)
        })
        .expect("copy");
    assert_eq!(sent_wrong, 0, "a segment whose digest differs is not kept");
    // Its buffers were lost with the process: the copy's tails start new ones.
    bufs = Buffers::default();
    let (sent, kept) = primary.replication().with_copy(0, |c| apply_incremental(&b, c, &inv, &mut bufs)).expect("copy");
    eprintln!("incremental copy: {sent} bytes sent, {kept} kept, of {total}");
    assert!(kept > 0 && sent < total / 2, "sent {sent}, kept {kept}, total {total}");
    for round in 6..8 {
        write_round(&primary, round, &mut model);
        if round == 6 {
            primary.compact().expect("compact");
        }
        settle(&primary);
        for ev in rec.take() {
            bufs.apply(&b, &ev);
        }
    }
    let pstats = settle(&primary);
    assert_eq!(
        b.stats().levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        pstats.levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        "the returned backup's levels hold what the primary's hold"
    );
    drop(b);
    let b = open_backup(&bdir, false);
    b.replication().promote(0, &bufs.tails()).expect("promote");
    assert_same(&b, &model, "the returned backup, promoted");

    // The old primary becomes a backup of the new one keeping its store (its segments mapped
    // to themselves): the new primary's maps translate them, and only what differs travels.
    primary.replication().set_ship_listener(None);
    primary.replication().demote_keeping(0).expect("demote keeping");
    assert!(matches!(primary.put(b"x", b"y"), Err(Error::BackupRegion(0))));
    let rec2 = Arc::new(Recorder::default());
    b.replication().set_ship_listener(Some(rec2.clone()));
    for i in 0..200u32 {
        let (k, v) = (format!("new{i:05}").into_bytes(), vec![b'n'; 30 + (i as usize % 5) * 100]);
        b.put(&k, &v).expect("put");
        model.insert(k, v);
    }
    settle(&b);
    rec2.take();
    let inv = primary.replication().backup_inventory(0).expect("inventory");
    let mut bufs = Buffers::default();
    let (sent, kept) = b.replication().with_copy(0, |c| apply_incremental(&primary, c, &inv, &mut bufs)).expect("copy");
    eprintln!("to the old primary: {sent} bytes sent, {kept} kept");
    assert!(kept > 4 * sent, "sent {sent}, kept {kept}");
    write_round(&b, 9, &mut model);
    b.compact().expect("compact");
    settle(&b);
    for ev in rec2.take() {
        bufs.apply(&primary, &ev);
    }
    primary.replication().promote(0, &bufs.tails()).expect("promote the old primary");
    assert_same(&primary, &model, "the old primary, caught up and promoted again");
}

/// A copy interrupted half-way (the connection lost, the backup still up) starts again with
/// what arrived: the segments and SSTs written whole are in the backup's inventory and are not
/// sent again.
#[test]
fn an_interrupted_copy_resumes_with_what_arrived() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let mut model = BTreeMap::new();
    for round in 0..4 {
        write_round(&primary, round, &mut model);
        if round == 1 {
            primary.compact().expect("compact");
        }
    }
    settle(&primary);
    let b = open_backup(&root.path().join("b"), true);
    let mut bufs = Buffers::default();
    let none = Inventory::default();
    let (first, _) = primary
        .replication()
        .with_copy(0, |c| {
            let half = c.pieces() - 2;
            apply_pieces(&b, c, &none, &mut bufs, half)
        })
        .expect("copy");
    let inv = b.replication().backup_inventory(0).expect("inventory");
    assert!(inv.ssts.iter().any(|s| s.0 == halyard_engine::ANY_LEVEL), "{inv:?}");
    let mut bufs = Buffers::default();
    let (sent, kept) = primary.replication().with_copy(0, |c| apply_incremental(&b, c, &inv, &mut bufs)).expect("copy");
    eprintln!("interrupted after {first} bytes; then {sent} sent, {kept} kept");
    assert!(kept * 10 >= first * 9, "kept {kept} of the {first} that arrived the first time");
    b.replication().promote(0, &bufs.tails()).expect("promote");
    assert_same(&b, &model, "the backup whose copy was interrupted, promoted");
}

/// A backup that follows its primary is caught up incrementally again and again (a link that
/// dropped and came back) while the primary goes on between the capture and the reads of the
/// copy's pieces, as the copy's reader thread sees it: writes, range deletes, compactions and
/// GC. Its live stream then resumes after the copy; promoted, it holds what the primary holds.
#[test]
fn a_live_backup_caught_up_again_and_again_holds_what_its_primary_holds() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let b = open_backup(&root.path().join("b"), true);
    let mut model = BTreeMap::new();
    let mut bufs = Buffers::default();
    let (mut sent_all, mut kept_all) = (0, 0);
    for round in 0..12u32 {
        write_round(&primary, round, &mut model);
        if round % 3 == 1 {
            primary.compact().expect("compact");
        }
        for ev in rec.take() {
            bufs.apply(&b, &ev);
        }
        if round % 2 == 0 {
            continue;
        }
        let inv = b.replication().backup_inventory(0).expect("inventory");
        // The capture: what queued for the link before it is dropped with the old session.
        let (copy, keep) = primary
            .replication()
            .with_copy(0, |mut c| {
                rec.take();
                let keep = c.resync(&inv);
                (c, keep)
            })
            .expect("copy");
        b.replication().resync_backup(0, &keep).expect("resync");
        bufs = Buffers::default();
        // The primary goes on while the copy's pieces are read.
        let (sent, kept) = std::thread::scope(|sc| {
            let model = &mut model;
            let writer = sc.spawn(|| {
                write_round(&primary, round + 100, model);
                primary.compact().expect("compact");
            });
            let r = apply_copy_pieces(&b, &copy, &mut bufs, usize::MAX);
            writer.join().expect("writer");
            r
        });
        bufs.apply(&b, &Event::Edits(copy.edits().to_vec()));
        drop(copy);
        (sent_all, kept_all) = (sent_all + sent, kept_all + kept);
        settle(&primary);
        for ev in rec.take() {
            bufs.apply(&b, &ev);
        }
    }
    eprintln!("incremental copies: {sent_all} bytes sent, {kept_all} kept");
    assert!(kept_all > sent_all, "sent {sent_all}, kept {kept_all}");
    b.replication().promote(0, &bufs.tails()).expect("promote");
    assert_same(&b, &model, "the backup caught up again and again, promoted");
}

/// Applies the first `upto` pieces of an incremental copy whose resync already ran (no last
/// edits); (sent, kept) bytes.
fn apply_copy_pieces(db: &Db, copy: &halyard_engine::RegionCopy, bufs: &mut Buffers, upto: usize) -> (u64, u64) {
    let (mut sent, mut kept) = (0, 0);
    for i in 0..copy.pieces().min(upto) {
        let evs = match copy.read(i).expect("read a piece of the copy") {
            CopyImage::Held { log, bytes } => {
                kept += bytes;
                if let Some((log, seg, salt)) = log {
                    db.replication().backup_keep_log(0, log, seg, salt).expect("keep a log segment");
                }
                continue;
            }
            CopyImage::Log(LogKind::Medium, seg, salt, _, bytes) => vec![Event::Medium(seg, salt, bytes)],
            CopyImage::Log(log, seg, salt, tail, bytes) => {
                let mut evs = vec![Event::Append { log, seg, salt, offset: 0, bytes }];
                if !tail {
                    evs.push(Event::Sealed { log, seg, salt });
                }
                evs
            }
            CopyImage::Sst(info, bytes) => vec![Event::Sst(info, bytes)],
            CopyImage::Named { .. } => panic!("a store on local files names no segment"),
        };
        for e in evs {
            if let Event::Append { bytes, .. } | Event::Sst(_, bytes) | Event::Medium(_, _, bytes) = &e {
                sent += bytes.len() as u64;
            }
            bufs.apply(db, &e);
        }
    }
    (sent, kept)
}

/// Tracks the range deletes a backup's catalog holds, by LSN, from the edits it was sent.
fn note_range_dels(kept: &mut HashMap<u64, Vec<u8>>, ev: &Event) {
    let Event::Edits(edits) = ev else { return };
    for e in edits {
        match e {
            Edit::AddRangeDel { start, lsn, .. } => {
                kept.insert(*lsn, start.clone());
            }
            Edit::DropRangeDel { lsn } => {
                kept.remove(lsn);
            }
            _ => {}
        }
    }
}

/// A backup reads what its levels hold as its primary does: a range delete that the catalog
/// keeps (its keys are in deeper levels than the merge that took it in) hides them on the
/// backup too, although the backup itself never wrote anything (its LSN stays where it was).
#[test]
fn a_backup_reads_its_levels_through_their_range_deletes() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let b = open_backup(&root.path().join("b"), true);
    let mut bufs = Buffers::default();
    let mut model = BTreeMap::new();
    for round in 0..3 {
        write_round(&primary, round, &mut model);
    }
    primary.compact().expect("compact");
    // The primary's background compactions may apply a range delete all the way down before
    // the backup sees it kept: a few tries, each on keys of its own. `flush` returns once the
    // merge that took the delete in is visible on the primary, which ships its edits just
    // after: the backup has it when an `AddRangeDel` of this range arrived and no drop since.
    let mut kept: HashMap<u64, Vec<u8>> = HashMap::new();
    let mut checked = None;
    for attempt in 0..10u32 {
        let (lo, hi) = (format!("user{:06}", 1000 + attempt * 150), format!("user{:06}", 1100 + attempt * 150));
        let (lo, hi) = (lo.into_bytes(), hi.into_bytes());
        primary.delete_range(&lo, &hi).expect("delete range");
        model.retain(|k, _| !(*k >= lo && *k < hi));
        primary.flush().expect("flush");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !kept.values().any(|s| *s == lo) && std::time::Instant::now() < deadline {
            for ev in rec.take() {
                note_range_dels(&mut kept, &ev);
                bufs.apply(&b, &ev);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        if kept.values().any(|s| *s == lo) {
            assert!(b.stats().range_dels >= 1, "the backup's catalog lacks a range delete it was sent");
            checked = Some((lo, hi, 1000 + attempt * 150));
            break;
        }
    }
    let (lo, hi, base) = checked.expect("a range delete kept in the backup's catalog");
    // Values the levels point to in the logs' unsealed tails are read from what arrived.
    for t in bufs.tails() {
        b.replication().backup_stage_tail(0, t.primary, t.salt, t.bytes).expect("stage");
    }
    if let Some(k) = b.scan(lo.clone()..hi.clone()).map(|r| r.expect("scan").0).next() {
        panic!("{} on the backup's scan", String::from_utf8_lossy(&k));
    }
    for i in base..base + 100 {
        let k = format!("user{i:06}").into_bytes();
        assert_eq!(b.get(&k).expect("get"), None, "{} on the backup", String::from_utf8_lossy(&k));
    }
    assert_eq!(contents(&b), model.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>());
}

/// The primary role handed back and forth between two stores, each old primary keeping its
/// store (`demote_keeping`) and caught up incrementally from the new one, with writes, range
/// deletes, compactions and GC on whichever leads; every value, read through its pointer on
/// each new primary, is the model's.
#[test]
fn the_primary_role_handed_back_and_forth_keeps_every_value_readable() {
    let root = tempfile::tempdir().expect("tempdir");
    let dbs = [Db::open(root.path().join("x"), opts()).expect("x"), open_backup(&root.path().join("y"), true)];
    let rec = Arc::new(Recorder::default());
    dbs[0].replication().set_ship_listener(Some(rec.clone()));
    let mut model = BTreeMap::new();
    let mut bufs = Buffers::default();
    let mut lead = 0usize;
    for hand in 0..6u32 {
        for round in 0..3 {
            write_round(&dbs[lead], hand * 10 + round, &mut model);
            if round == 1 {
                dbs[lead].compact().expect("compact");
            }
            if hand % 2 == 1 {
                dbs[lead].gc().expect("gc");
            }
            for ev in rec.take() {
                bufs.apply(&dbs[1 - lead], &ev);
            }
        }
        // The handoff: the primary writes its L0 out (every other time), the backup holds
        // everything and is promoted; the old primary keeps its store and catches up.
        if hand % 2 == 0 {
            dbs[lead].flush().expect("flush");
        }
        settle(&dbs[lead]);
        for ev in rec.take() {
            bufs.apply(&dbs[1 - lead], &ev);
        }
        dbs[lead].replication().set_ship_listener(None);
        let next = 1 - lead;
        dbs[next].replication().promote(0, &bufs.tails()).expect("promote");
        assert_same(&dbs[next], &model, &format!("the new primary after handoff {hand}"));
        // The new primary takes writes before its old primary is back as a backup.
        dbs[next].replication().set_ship_listener(Some(rec.clone()));
        write_round(&dbs[next], hand * 10 + 5, &mut model);
        dbs[lead].replication().demote_keeping(0).expect("demote keeping");
        let inv = dbs[lead].replication().backup_inventory(0).expect("inventory");
        bufs = Buffers::default();
        let (copy, keep) = dbs[next]
            .replication()
            .with_copy(0, |mut c| {
                rec.take();
                let keep = c.resync(&inv);
                (c, keep)
            })
            .expect("copy");
        dbs[lead].replication().resync_backup(0, &keep).expect("resync");
        // And while the copy's pieces are read.
        let (sent, kept) = std::thread::scope(|sc| {
            let (writer, model) = (&dbs[next], &mut model);
            let w = sc.spawn(move || write_round(writer, hand * 10 + 6, model));
            let r = apply_copy_pieces(&dbs[lead], &copy, &mut bufs, usize::MAX);
            w.join().expect("writer");
            r
        });
        bufs.apply(&dbs[lead], &Event::Edits(copy.edits().to_vec()));
        drop(copy);
        eprintln!("handoff {hand}: {sent} bytes sent, {kept} kept");
        assert_same(&dbs[next], &model, &format!("the new primary after its old primary's copy {hand}"));
        lead = next;
    }
    // The last old primary, promoted once more, reads what the model holds too.
    for ev in rec.take() {
        bufs.apply(&dbs[1 - lead], &ev);
    }
    dbs[lead].replication().set_ship_listener(None);
    dbs[1 - lead].replication().promote(0, &bufs.tails()).expect("promote");
    assert_same(&dbs[1 - lead], &model, "the last old primary, promoted");
}

/// A primary's splits reach its backup in the stream (after the tails they seal, before either
/// half's writes): the backup splits at the same LSN, both halves follow their primaries
/// through writes, compactions and GC of the segments they share, and each half, promoted,
/// reads what the primary's does.
#[test]
fn a_backup_splits_where_its_primary_did_and_both_halves_follow() {
    let root = tempfile::tempdir().expect("tempdir");
    // GC runs when the test says (the segment the last split sealed must stay).
    let primary = Db::open(root.path().join("p"), Options { gc_interval_ms: 3_600_000, ..opts() }).expect("primary");
    let backup = open_backup(&root.path().join("b"), true);
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let mut model = BTreeMap::new();
    let mut bufs: HashMap<u32, Buffers> = HashMap::new();
    let ship = |bufs: &mut HashMap<u32, Buffers>| {
        for (region, ev) in rec.take_tagged() {
            bufs.entry(region).or_default().apply_to(&backup, region, &ev);
        }
    };
    for round in 0..2 {
        write_round(&primary, round, &mut model);
        ship(&mut bufs);
    }
    primary.compact().expect("compact");
    // Splits with writers going on (their puts route to the halves by themselves).
    for (round, (at, child)) in
        [(b"user001500".as_slice(), 1u32), (b"user002500".as_slice(), 2)].into_iter().enumerate()
    {
        let round = 10 + round as u32;
        std::thread::scope(|sc| {
            let (p, m) = (&primary, &mut model);
            let w = sc.spawn(move || write_round(p, round, m));
            std::thread::sleep(std::time::Duration::from_millis(5));
            let parent = primary
                .regions()
                .into_iter()
                .find(|r| r.start.as_slice() <= at && r.end.as_deref().is_none_or(|e| at < e))
                .map(|r| r.id);
            primary.split_region(parent.expect("parent"), at, child).expect("split");
            w.join().expect("writer");
        });
        // GC of the segments the halves share, the first time; the second time the values
        // written before the split stay where they are.
        if child == 1 {
            primary.gc().expect("gc");
        }
        ship(&mut bufs);
    }
    // No write after the last split's round: the values it wrote before the split stay live
    // in the large-log segment the split sealed.
    primary.compact().expect("compact");
    settle(&primary);
    ship(&mut bufs);
    assert_same(&primary, &model, "the primary");
    let ranges = |db: &Db| db.regions().into_iter().map(|r| (r.id, r.start, r.end)).collect::<Vec<_>>();
    assert_eq!(ranges(&backup), ranges(&primary), "the backup's regions");
    // Each large-log segment of each half reached the backup: whole, or as the buffer of the
    // tail (the one a split sealed included, which both halves name).
    for (id, b) in &bufs {
        let maps = backup.replication().replica_maps(*id).expect("maps");
        for (seg, salt) in primary.replication().log_segments(*id, LogKind::Large).expect("large log") {
            let held =
                maps.log.iter().any(|(k, _)| *k == (seg, salt)) || b.0.values().any(|t| (t.0, t.1) == (seg, salt));
            assert!(held, "region {id}: large-log segment {seg} never reached the backup");
        }
    }
    for id in bufs.keys() {
        let digest = |db: &Db| db.replication().levels_digest(*id).expect("digest");
        assert_eq!(digest(&backup), digest(&primary), "region {id}: the backup's levels are the primary's");
    }
    primary.replication().set_ship_listener(None);
    for (id, b) in &bufs {
        backup.replication().promote(*id, &b.tails()).expect("promote");
    }
    assert_same(&backup, &model, "the backup, each half promoted");
}

/// Two halves of a split merge again on the primary; the backup joins its copies of them and
/// an incremental copy of the merged region aligns it, keeping most of what it held (frames
/// the old streams carried last, the merge's sealed tails, may be lost on the way).
#[test]
fn a_backup_merges_where_its_primary_did_and_an_incremental_copy_aligns_it() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let backup = open_backup(&root.path().join("b"), true);
    let mut model = BTreeMap::new();
    let mut bufs: HashMap<u32, Buffers> = HashMap::new();
    let ship = |bufs: &mut HashMap<u32, Buffers>| {
        for (region, ev) in rec.take_tagged() {
            bufs.entry(region).or_default().apply_to(&backup, region, &ev);
        }
    };
    for round in 0..3 {
        write_round(&primary, round, &mut model);
        ship(&mut bufs);
    }
    primary.split_region(0, b"user001500", 1).expect("split");
    write_round(&primary, 3, &mut model);
    settle(&primary);
    ship(&mut bufs);
    assert!(
        primary.merge_regions(0, 1).is_err(),
        "halves that still share SSTs and hide each other's keys with range deletes are not merged"
    );
    for id in [0, 1] {
        primary.compact_region(id).expect("compact the half");
    }
    settle(&primary);
    ship(&mut bufs);
    primary.merge_regions(0, 1).expect("merge");
    // The old streams' last frames (the tails the merge sealed) are lost.
    let lost = rec.take_tagged();
    assert!(!lost.is_empty(), "the merge sealed the halves' tails");
    backup.replication().backup_merge(0, 1).expect("the backup merges its copies");
    let ranges = |db: &Db| db.regions().into_iter().map(|r| (r.id, r.start, r.end)).collect::<Vec<_>>();
    assert_eq!(ranges(&backup), ranges(&primary), "the backup's regions");
    let inv = backup.replication().backup_inventory(0).expect("inventory");
    let mut merged = bufs.remove(&0).unwrap_or_default();
    let (total, (sent, kept)) = primary
        .replication()
        .with_copy(0, |c| (c.total_bytes(), apply_incremental(&backup, c, &inv, &mut merged)))
        .expect("copy");
    assert!(kept > 0 && sent < total / 2, "sent {sent}, kept {kept}, total {total}");
    let digest = |db: &Db| db.replication().levels_digest(0).expect("digest");
    assert_eq!(digest(&backup), digest(&primary), "the merged copy's levels are the primary's");
    write_round(&primary, 4, &mut model);
    settle(&primary);
    for (_, ev) in rec.take_tagged() {
        merged.apply(&backup, &ev);
    }
    assert_same(&primary, &model, "the merged primary");
    backup.replication().promote(0, &merged.tails()).expect("promote");
    assert_same(&backup, &model, "the merged backup, promoted");
}

/// A backup copy a node no longer holds leaves the store for good (across a reopen), and a
/// region overlapping its old range can be created in its place.
#[test]
fn a_dropped_backup_region_is_gone_after_a_reopen_and_its_range_free() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let dir = root.path().join("b");
    let backup = open_backup(&dir, true);
    let mut model = BTreeMap::new();
    let mut bufs = Buffers::default();
    write_round(&primary, 0, &mut model);
    primary.compact().expect("compact");
    settle(&primary);
    for ev in rec.take() {
        bufs.apply(&backup, &ev);
    }
    assert!(backup.replication().region_bytes(0).expect("bytes") > 0);
    assert!(backup.replication().create_backup_region(1, b"a", None).is_err(), "overlaps region 0");
    backup.replication().drop_backup_region(0).expect("drop");
    assert!(backup.regions().is_empty());
    drop(backup);
    let backup = open_backup(&dir, false);
    assert!(backup.regions().is_empty(), "the drop survives a reopen");
    backup.replication().create_backup_region(1, b"a", None).expect("the range is free");
    assert_eq!(backup.regions().len(), 1);
}

/// A handoff's fence: once `fence` returns, writers racing it fail with `RegionFenced` and no
/// LSN past the one it returned is taken (nor shipped), GC included; `unfence` resumes writes.
#[test]
fn a_fenced_region_takes_no_write_past_the_lsn_its_fence_returned() {
    let root = tempfile::tempdir().expect("tempdir");
    let db = Arc::new(Db::open(root.path().join("x"), opts()).expect("open"));
    let rec = Arc::new(Recorder::default());
    db.replication().set_ship_listener(Some(rec.clone()));
    let h = db.region(0).expect("region 0");
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..4u32)
        .map(|t| {
            let (h, stop) = (db.region(0).expect("region 0"), stop.clone());
            std::thread::spawn(move || {
                let (mut last, mut refused, mut after_stop) = (0u64, 0u32, 0u32);
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        after_stop += 1;
                        if refused > 0 || after_stop > 1000 {
                            break;
                        }
                    }
                    match h.put(format!("t{t}-{i}").as_bytes(), &[7u8; 100]) {
                        Ok(lsn) => last = last.max(lsn),
                        Err(Error::RegionFenced(0)) => refused += 1,
                        Err(e) => panic!("writer {t}: {e}"),
                    }
                }
                last
            })
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(50));
    let fenced = h.fence();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked = writers.into_iter().map(|w| w.join().expect("writer")).max().unwrap_or(0);
    assert!(fenced > 0, "writers wrote before the fence");
    assert_eq!(acked, fenced, "the last LSN a writer got is the fence's");
    db.gc().expect("gc of a fenced region");
    let shipped = rec.0.lock().unwrap().len();
    assert!(matches!(h.put(b"late", b"1"), Err(Error::RegionFenced(0))));
    assert_eq!(h.lsn(), fenced, "nothing became visible past the fence");
    assert_eq!(rec.0.lock().unwrap().len(), shipped, "nothing shipped while fenced");
    h.unfence();
    assert_eq!(h.put(b"late", b"1").expect("a write once the fence is lifted"), fenced + 1);
}

/// The old primary dies after sealing an L0 segment that reached one backup only: the other
/// backup is promoted, and the first, once it took the new primary's Remap (its tails stored
/// whole, its maps re-keyed), must hold what the new primary holds, not the records only it
/// received.
#[test]
fn a_backup_ahead_of_the_promoted_one_by_a_sealed_segment_holds_the_new_primary_s_history() {
    let root = tempfile::tempdir().expect("tempdir");
    let Trio { primary, rec, b1, b2, mut buf1, mut buf2, model: _ } = trio(root.path(), 2);
    settle(&primary);
    for ev in rec.take() {
        buf1.apply(&b1, &ev);
        buf2.apply(&b2, &ev);
    }
    // Writes until the L0 log seals a segment, and a few more into the next one.
    let mut events = Vec::new();
    let mut sealed_at = None;
    for i in 0..200_000u32 {
        primary.put(format!("stray{i:06}").as_bytes(), &[b's'; 100]).expect("put");
        events.extend(rec.take());
        if sealed_at.is_none() {
            sealed_at = events.iter().position(|e| matches!(e, Event::Sealed { log: LogKind::L0, .. }));
        } else if events.len() > sealed_at.unwrap_or(0) + 20 {
            break;
        }
    }
    let sealed_at = sealed_at.expect("the L0 log sealed a segment");
    let last_append = events[..sealed_at].iter().rposition(|e| matches!(e, Event::Append { log: LogKind::L0, .. }));
    let cut = last_append.expect("an append before the seal");
    for ev in &events[..cut] {
        buf1.apply(&b1, ev);
    }
    for ev in &events {
        buf2.apply(&b2, ev);
    }
    drop(primary);
    let tails: Vec<(LogKind, u32, u32, Vec<u8>)> =
        buf1.0.iter().map(|(log, (s, t, b))| (*log, *s, *t, b.clone())).collect();
    b1.replication().promote(0, &buf1.tails()).expect("promote");
    // Backup 2 takes the Remap as the replica applies it (`apply_remap`): its own buffers go,
    // the new primary's tails are stored as whole segments, the maps are re-keyed.
    let seg_bytes = b2.options().segment_bytes as usize;
    for (log, seg, salt, mut img) in tails {
        img.resize(seg_bytes.max(img.len()), 0);
        b2.replication().backup_log_segment(0, log, seg, salt, &img).expect("tail");
    }
    b2.replication().remap(0, &b1.replication().replica_maps(0).expect("maps")).expect("remap");
    b2.replication().promote(0, &[]).expect("promote backup 2");
    let (want, got) = (contents(&b1), contents(&b2));
    let extra: Vec<_> = got.iter().filter(|kv| !want.contains(kv)).map(|(k, _)| String::from_utf8_lossy(k)).collect();
    assert!(extra.is_empty(), "backup 2 holds {} pairs the new primary lacks, first {:?}", extra.len(), extra.first());
    assert_eq!(got.len(), want.len(), "backup 2 holds what the new primary holds");
}

/// Compactions carry shadowed versions whose values GC moved, pointing into large-log
/// segments the primary dropped: the SSTs it ships void those pointers, so that a backup
/// reserves no segment for them (one that would never arrive nor be freed, and that a promoted
/// backup would copy on). After rounds of writes, compactions and GC, every log segment the
/// backup maps is one its logs hold, and it holds as many as its primary.
#[test]
fn a_backup_keeps_no_segment_for_a_pointer_its_primary_dropped() {
    let root = tempfile::tempdir().expect("tempdir");
    let primary = Db::open(root.path().join("p"), opts()).expect("primary");
    let backup = open_backup(&root.path().join("b"), true);
    let rec = Arc::new(Recorder::default());
    primary.replication().set_ship_listener(Some(rec.clone()));
    let (mut model, mut bufs) = (BTreeMap::new(), Buffers::default());
    for round in 0..12 {
        write_round(&primary, round, &mut model);
        if round % 3 == 2 {
            primary.compact().expect("compact");
            primary.gc().expect("gc");
        }
        for ev in rec.take() {
            bufs.apply(&backup, &ev);
        }
    }
    settle(&primary);
    for ev in rec.take() {
        bufs.apply(&backup, &ev);
    }
    let logs = |db: &Db| {
        let kinds = [LogKind::L0, LogKind::Large, LogKind::Medium];
        kinds.iter().flat_map(|k| db.replication().log_segments(0, *k).expect("log")).collect::<Vec<_>>()
    };
    let held: std::collections::HashSet<u32> = logs(&backup).into_iter().map(|(s, _)| s).collect();
    let maps = backup.replication().replica_maps(0).expect("maps");
    // A tail still buffered may be mapped already (an SST points into it).
    let buffered = |k: &(u32, u32)| bufs.0.values().any(|t| (t.0, t.1) == *k);
    let stale: Vec<_> = maps.log.iter().filter(|(k, l)| !held.contains(l) && !buffered(k)).collect();
    assert!(stale.is_empty(), "map entries of segments no log holds: {stale:?}");
    let tails = bufs.0.len();
    assert_eq!(held.len() + tails, logs(&primary).len(), "the backup's log segments and tails against its primary's");
    primary.replication().set_ship_listener(None);
    backup.replication().promote(0, &bufs.tails()).expect("promote");
    assert_same(&backup, &model, "the backup, promoted");
}
