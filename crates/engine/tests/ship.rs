//! The replication hooks: a region's levels are copied from a primary store to a backup
//! store through the stream of compaction output segments and version edits, with log
//! pointers rewritten through a segment map, and the copy reads back identically.

use halyard_engine::{Db, Edit, Error, LogKind, Options, ShipListener, ShippedSegment, SstInfo};
use parking_lot_free::Recorder;
use std::collections::HashMap;
use std::sync::Arc;

mod parking_lot_free {
    use super::*;
    use std::sync::Mutex;

    #[derive(Debug)]
    pub enum Event {
        Sst(SstInfo, Vec<u8>),
        Medium(u32, u32, Vec<u8>),
        Edits(Vec<Edit>),
    }

    #[derive(Default)]
    pub struct Recorder(pub Mutex<Vec<Event>>);

    impl ShipListener for Recorder {
        fn segment(&self, region: u32, seg: ShippedSegment<'_>) {
            assert_eq!(region, 0);
            let ev = match seg {
                ShippedSegment::Sst { info, bytes } => Event::Sst(info.clone(), bytes.to_vec()),
                ShippedSegment::MediumRun { seg, salt, bytes } => Event::Medium(seg, salt, bytes.to_vec()),
            };
            self.0.lock().expect("lock").push(ev);
        }
        fn edits(&self, region: u32, edits: &[Edit]) {
            assert_eq!(region, 0);
            self.0.lock().expect("lock").push(Event::Edits(edits.to_vec()));
        }
    }
}
use parking_lot_free::Event;

fn kv(i: u32, round: u32) -> (Vec<u8>, Vec<u8>) {
    let k = format!("user{:06}", (i * 7919) % 5000).into_bytes();
    let len = [5usize, 20, 80, 150, 300, 900][((i + round) % 6) as usize];
    let mut v = format!("{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    (k, v)
}

#[test]
fn levels_copied_through_segment_stream_read_back_identically() {
    let pdir = tempfile::tempdir().expect("tempdir");
    let bdir = tempfile::tempdir().expect("tempdir");
    // GC stays off on the primary here: the backup receives the large log whole below.
    let opts = Options { gc_threshold: 1.0, ..Options::tiny() };
    let primary = Db::open(pdir.path(), opts.clone()).expect("primary");
    let rec = Arc::new(Recorder::default());
    primary.set_ship_listener(Some(rec.clone()));
    for round in 0..3 {
        for i in 0..5000 {
            let (k, v) = kv(i, round);
            if (i + round) % 11 == 0 {
                primary.delete(&k).expect("delete");
            } else {
                primary.put(&k, &v).expect("put");
            }
        }
    }
    primary.compact().expect("compact");
    let stats = primary.stats();
    assert!(stats.levels.iter().filter(|l| l.ssts > 0).count() >= 2, "levels {:?}", stats.levels);

    let backup = Db::open(bdir.path(), Options { default_region: false, ..opts }).expect("backup");
    let region = backup.create_backup_region(0, b"", None).expect("backup region");
    assert!(matches!(region.put(b"x", b"y"), Err(Error::BackupRegion(0))));

    // Log replication's part: the large log arrives as whole segments (DESIGN.md §3 step 2).
    // The log map is keyed by (segment, salt): the primary reuses segment numbers, the salt
    // names the incarnation a pointer refers to. `map` translates the segments edits name,
    // which always refer to the current incarnation.
    let mut log_map: HashMap<(u32, u32), u32> = HashMap::new();
    let mut map: HashMap<u32, u32> = HashMap::new();
    for (seg, salt) in primary.log_segments(0, LogKind::Large).expect("large log") {
        let bytes = primary.read_segment(0, seg).expect("read");
        let local = backup.alloc_segment().expect("alloc");
        backup.write_segment(local, &bytes).expect("write");
        backup.install_log_segment(0, LogKind::Large, local, salt).expect("install log");
        log_map.insert((seg, salt), local);
        map.insert(seg, local);
    }
    // Index shipping: segments as produced, then the edit that publishes them.
    let events = std::mem::take(&mut *rec.0.lock().expect("lock"));
    let (mut ssts, mut runs, mut edits) = (0, 0, 0);
    for ev in events {
        match ev {
            Event::Medium(seg, salt, bytes) => {
                let local = match log_map.get(&(seg, salt)) {
                    Some(&l) => l,
                    None => {
                        let l = backup.alloc_segment().expect("alloc");
                        log_map.insert((seg, salt), l);
                        l
                    }
                };
                map.insert(seg, local);
                backup.write_segment(local, &bytes).expect("write run");
                runs += 1;
            }
            Event::Sst(info, mut bytes) => {
                // Medium runs still being written map to segments reserved on the fly.
                let reserve = std::cell::RefCell::new(Vec::new());
                {
                    let probe = |s: u32, salt: u32| {
                        if !log_map.contains_key(&(s, salt)) {
                            reserve.borrow_mut().push((s, salt));
                        }
                        Some(s)
                    };
                    let mut copy = bytes.clone();
                    backup.rewrite_sst(&mut copy, &info, &probe).expect("probe");
                }
                for (s, salt) in reserve.into_inner() {
                    if let std::collections::hash_map::Entry::Vacant(e) = log_map.entry((s, salt)) {
                        let l = backup.alloc_segment().expect("alloc");
                        e.insert(l);
                        map.insert(s, l);
                    }
                }
                backup.rewrite_sst(&mut bytes, &info, &|s, salt| log_map.get(&(s, salt)).copied()).expect("rewrite");
                let local = backup.alloc_segment().expect("alloc");
                backup.write_segment(local, &bytes).expect("write sst");
                map.insert(info.seg, local);
                ssts += 1;
            }
            Event::Edits(e) => {
                backup.install_edits(0, &e, &|s| map.get(&s).copied()).expect("install edits");
                edits += 1;
            }
        }
    }
    assert!(ssts > 10 && runs > 0 && edits > 10, "ssts {ssts} medium runs {runs} edits {edits}");

    let check = |b: &Db| {
        let want: Vec<_> = primary.scan(..).map(|r| r.expect("primary scan")).collect();
        let got: Vec<_> = b.scan(..).map(|r| r.expect("backup scan")).collect();
        assert_eq!(got.len(), want.len());
        assert!(got == want, "backup contents differ from the primary");
        for i in 0..5000 {
            let (k, _) = kv(i, 0);
            assert_eq!(b.get(&k).expect("backup get"), primary.get(&k).expect("primary get"));
        }
    };
    check(&backup);
    let bstats = backup.stats();
    assert_eq!(bstats.compactions, 0, "a backup never compacts");
    assert_eq!(
        bstats.levels.iter().map(|l| l.entries).collect::<Vec<_>>(),
        primary.stats().levels.iter().map(|l| l.entries).collect::<Vec<_>>()
    );
    drop(backup);
    let backup =
        Db::open(bdir.path(), Options { default_region: false, ..Options { gc_threshold: 1.0, ..Options::tiny() } })
            .expect("backup reopen");
    check(&backup);
}
