//! Fault injection: damaged bytes in SSTs and logs, damaged superblock copies, a full device,
//! real ENOSPC on a small tmpfs, and concurrent use while compaction and GC run.
//!
//! The tmpfs tests need root (they mount a tmpfs on their temporary directory) and skip
//! themselves with a message where mounting is not possible.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use halyard_engine::{Db, Error, LogKind, Options, ScanOptions, SstInfo, SyncMode, DATA_FILE};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

/// `Options::tiny().segment_bytes`.
const SEG: u64 = 64 << 10;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// xorshift64*: a seeded, dependency-free PRNG so that every run flips the same bytes.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    /// A non-zero byte to XOR into a victim byte.
    fn flip_mask(&mut self) -> u8 {
        (self.below(255) + 1) as u8
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key{:08}", i).into_bytes()
}

/// Under Options::tiny (11-byte keys; small < 40 <= medium < 200 <= large): values of 10
/// (small), 90 (medium) and 700 (large) bytes, depending on `i + round`.
fn value(i: u32, round: u32) -> Vec<u8> {
    let len = match (i + round) % 5 {
        0 | 1 => 10,
        2 | 3 => 90,
        _ => 700,
    };
    let mut v = format!("v{round}-{i}-").into_bytes();
    v.resize(len, b'a' + (round % 26) as u8);
    v
}

fn show(k: &[u8]) -> String {
    String::from_utf8_lossy(k).into_owned()
}

/// Aborts the test binary if the test is still running after `secs`: a hang becomes a loud
/// failure instead of a stuck CI job. Dropping the guard disarms it.
struct Watchdog {
    _tx: mpsc::Sender<()>,
}

impl Watchdog {
    fn arm(what: &'static str, secs: u64) -> Watchdog {
        let (tx, rx) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(Duration::from_secs(secs)) {
                eprintln!("{what}: still running after {secs} s: the engine hangs; aborting");
                std::process::abort();
            }
        });
        Watchdog { _tx: tx }
    }
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn xor_byte(file: &Path, off: u64, mask: u8) {
    let f = OpenOptions::new().read(true).write(true).open(file).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, off).unwrap();
    b[0] ^= mask;
    f.write_all_at(&b, off).unwrap();
    f.sync_all().unwrap();
}

fn read_at(file: &Path, off: u64, len: usize) -> Vec<u8> {
    let f = File::open(file).unwrap();
    let mut b = vec![0u8; len];
    f.read_exact_at(&mut b, off).unwrap();
    b
}

/// A record of a log segment, as `src/format/record.rs` lays it out.
struct LogRecord {
    off: u64,
    len: u64,
    lsn: u64,
    key: Vec<u8>,
    value: Vec<u8>,
}

/// The data file of the store in `dir` that holds segment `seg`, and the segment's offset in it:
/// segment `s` of a store with `n` data files lives in file `s % n` at `(s / n) * SEG`.
fn seg_file(dir: &Path, seg: u32) -> (PathBuf, u64) {
    let files = halyard_engine::data_files(dir);
    let n = files.len() as u64;
    assert!(n > 0, "no data files in {}", dir.display());
    (files[(seg as u64 % n) as usize].clone(), seg as u64 / n * SEG)
}

/// The records of a log segment that carry its salt, from its start (bytes past them are left
/// over from the segment's earlier lives).
fn log_records(dir: &Path, seg: u32, salt: u32) -> Vec<LogRecord> {
    let (file, base) = seg_file(dir, seg);
    let img = read_at(&file, base, SEG as usize);
    let (u16_at, u32_at) = (
        |b: &[u8], i: usize| u16::from_le_bytes([b[i], b[i + 1]]) as usize,
        |b: &[u8], i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap()),
    );
    let mut out = Vec::new();
    let mut pos = 0;
    while pos + 34 <= img.len() {
        let b = &img[pos..];
        if u16_at(b, 0) != 0x4B56 || u32_at(b, 4) != salt {
            break;
        }
        let (k, v) = (u16_at(b, 16), u32_at(b, 18) as usize);
        let len = 22 + k + v + 12;
        if len > b.len() {
            break;
        }
        out.push(LogRecord {
            off: pos as u64,
            len: len as u64,
            lsn: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            key: b[22..22 + k].to_vec(),
            value: b[22 + k..22 + k + v].to_vec(),
        });
        pos += len;
    }
    out
}

/// Fills a store with a mix of small, medium and large pairs over three rounds, deletes every
/// 7th key, compacts, and returns the expected contents.
fn fill_mixed(db: &Db, n: u32) -> Model {
    for round in 0..3 {
        for i in 0..n {
            db.put(&key(i), &value(i, round)).unwrap();
        }
    }
    for i in (0..n).step_by(7) {
        db.delete(&key(i)).unwrap();
    }
    db.compact().unwrap();
    (0..n).filter(|i| i % 7 != 0).map(|i| (key(i), value(i, 2))).collect()
}

/// Every key must read back exactly and a forward and a reverse scan must equal the model.
fn verify_exact(db: &Db, model: &Model, probe: &[Vec<u8>], ctx: &str) {
    for k in probe {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)));
        assert_eq!(got.as_ref(), model.get(k), "{ctx}: get {}", show(k));
    }
    let fwd: Vec<(Vec<u8>, Vec<u8>)> = db.scan(..).map(|r| r.unwrap_or_else(|e| panic!("{ctx}: scan: {e}"))).collect();
    assert!(fwd.len() == model.len() && fwd.iter().zip(model).all(|(a, b)| (&a.0, &a.1) == (b.0, b.1)), "{ctx}: scan");
    let rev: Vec<Vec<u8>> = db
        .scan_with(.., ScanOptions { reverse: true, limit: None })
        .map(|r| r.unwrap_or_else(|e| panic!("{ctx}: reverse scan: {e}")).0)
        .collect();
    assert!(rev.iter().eq(model.keys().rev()), "{ctx}: reverse scan");
}

/// What a check of a damaged store saw.
#[derive(Default, Debug)]
struct Damage {
    corrupt_gets: usize,
    scan_corrupt: bool,
    rev_scan_corrupt: bool,
}

impl Damage {
    fn detected(&self) -> bool {
        self.corrupt_gets > 0 || self.scan_corrupt || self.rev_scan_corrupt
    }
}

/// Checks a store that may hold damaged bytes: every read gives the right answer or
/// `Error::Corruption`; never a wrong value, never a missing or invented key without an error.
fn check_damaged(db: &Db, model: &Model, probe: &[Vec<u8>], ctx: &str) -> Damage {
    let mut d = Damage::default();
    for k in probe {
        match db.get(k) {
            Ok(v) => assert!(
                v.as_ref() == model.get(k),
                "{ctx}: get {} gave a wrong answer: {:?} instead of {:?}",
                show(k),
                v.map(|v| show(&v)),
                model.get(k).map(|v| show(v))
            ),
            Err(Error::Corruption { .. }) => d.corrupt_gets += 1,
            Err(e) => panic!("{ctx}: get {}: unexpected error {e}", show(k)),
        }
    }
    for reverse in [false, true] {
        let mut want: Box<dyn Iterator<Item = (&Vec<u8>, &Vec<u8>)>> =
            if reverse { Box::new(model.iter().rev()) } else { Box::new(model.iter()) };
        let mut corrupt = false;
        for item in db.scan_with(.., ScanOptions { reverse, limit: None }) {
            match item {
                Ok((k, v)) => {
                    let Some((wk, wv)) = want.next() else {
                        panic!("{ctx}: scan (reverse {reverse}) returned {} past the end", show(&k));
                    };
                    assert_eq!(show(&k), show(wk), "{ctx}: scan (reverse {reverse}) skipped or invented a key");
                    assert!(&v == wv, "{ctx}: scan (reverse {reverse}) gave a wrong value for {}", show(&k));
                }
                Err(Error::Corruption { .. }) => {
                    corrupt = true;
                    break;
                }
                Err(e) => panic!("{ctx}: scan (reverse {reverse}): unexpected error {e}"),
            }
        }
        if !corrupt {
            let rest = want.next();
            assert!(
                rest.is_none(),
                "{ctx}: scan (reverse {reverse}) ended without an error before {:?}",
                rest.map(|r| show(r.0))
            );
        }
        if reverse {
            d.rev_scan_corrupt = corrupt;
        } else {
            d.scan_corrupt = corrupt;
        }
    }
    d
}

/// Options that keep a store still: GC never reclaims a segment. (A long `gc_interval_ms` alone
/// is not enough: every memtable switch and flush wakes the GC thread for a pass.)
fn quiet() -> Options {
    Options { gc_interval_ms: 3_600_000, gc_threshold: 1.0, ..Options::tiny() }
}

/// Where region 0 keeps its data.
struct Layout {
    ssts: Vec<SstInfo>,
    /// (segment, salt) of the large log.
    large: Vec<(u32, u32)>,
    /// (segment, salt) of the medium log.
    medium: Vec<(u32, u32)>,
}

/// The SSTs and log segments of region 0, read from a store opened without GC.
fn layout(dir: &Path) -> Layout {
    let db = Db::open(dir, quiet()).unwrap();
    Layout {
        ssts: db.replication().level_ssts(0).unwrap().into_iter().flatten().collect(),
        large: db.replication().log_segments(0, LogKind::Large).unwrap(),
        medium: db.replication().log_segments(0, LogKind::Medium).unwrap(),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Damaged SST and log bytes
// ---------------------------------------------------------------------------------------------

#[test]
fn corrupt_sst_bytes_give_corruption_never_wrong_data() {
    let _wd = Watchdog::arm("corrupt_sst_bytes_give_corruption_never_wrong_data", 300);
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let n = 3000;
    let model = {
        let db = Db::open(&pristine, Options::tiny()).unwrap();
        let model = fill_mixed(&db, n);
        let s = db.stats();
        assert!(s.levels.iter().filter(|l| l.ssts > 0).count() >= 2, "want several levels: {:?}", s.levels);
        model
    };
    // Keys written, deleted, and never written.
    let probe: Vec<Vec<u8>> = (0..n + 20).map(key).collect();
    {
        // The untouched store passes the strict check. (Without GC: the pristine copy must not
        // change from here on, or the layout below would describe another store.)
        let db = Db::open(&pristine, quiet()).unwrap();
        // Records GC moved after the last compaction sit past the LSN the levels cover, where
        // recovery replays them; put them in the levels so that every log record the flips
        // below hit is one that reads, not recovery, must check.
        db.compact().unwrap();
        verify_exact(&db, &model, &probe, "pristine");
    }
    let Layout { ssts, large, medium } = layout(&pristine);
    assert!(!ssts.is_empty() && !large.is_empty(), "ssts {} large segments {}", ssts.len(), large.len());

    let mut rng = Rng::new(0x5eed_0001);
    let mut trial = 0;
    let mut run = |what: &str, seg: u32, within: u64, rng: &mut Rng| -> Damage {
        trial += 1;
        let copy = root.path().join(format!("trial{trial}"));
        copy_dir(&pristine, &copy);
        let (file, base) = seg_file(&copy, seg);
        let mask = rng.flip_mask();
        xor_byte(&file, base + within, mask);
        let ctx = format!("trial {trial}: {what} segment {seg}, byte {within} ^= {mask:#04x}");
        // A cache that holds the whole store keeps the trial fast; damaged nodes never enter it.
        let d = match Db::open(&copy, Options { cache_bytes: 32 << 20, ..Options::tiny() }) {
            Ok(db) => check_damaged(&db, &model, &probe, &ctx),
            // Opening reads the logs (not the SSTs): a damaged log may be refused, as corruption.
            Err(Error::Corruption { .. }) if what != "SST" => Damage { corrupt_gets: usize::MAX, ..Damage::default() },
            Err(e) => panic!("{ctx}: open failed: {e}"),
        };
        fs::remove_dir_all(&copy).unwrap();
        d
    };

    let sst_trials = 40;
    let mut detected = 0;
    let mut unnoticed: BTreeMap<&str, usize> = BTreeMap::new();
    for _ in 0..sst_trials {
        let s = &ssts[rng.below(ssts.len() as u64) as usize];
        let within = rng.below(s.used_bytes as u64);
        if run("SST", s.seg, within, &mut rng).detected() {
            detected += 1;
        } else {
            let part = match within as u32 {
                w if w < s.leaf_count * Options::tiny().node_bytes as u32 => "leaf",
                w if w < s.bloom_off => "index node",
                w if w < s.bloom_off + s.bloom_len => "Bloom filter",
                _ => "footer or padding",
            };
            *unnoticed.entry(part).or_default() += 1;
        }
    }
    // The footer repeats what the catalog holds and is never read back; a damaged index node
    // or filter of an SST whose keys all live in newer levels is not read either.
    eprintln!("SST flips: {detected}/{sst_trials} detected; unnoticed ones hit: {unnoticed:?}");
    assert!(detected * 2 >= sst_trials, "only {detected} of {sst_trials} SST flips were noticed by any read");

    // Log flips: every other trial hits a record holding a key's current value (for the large
    // log, the record the index points to: that get must report the damage); the others hit
    // any byte of the segment's records.
    let covered = ssts.iter().map(|s| s.max_lsn).max().unwrap_or(0);
    for (kind, segs, trials) in [("large-log", &large, 16), ("medium-log", &medium, 8)] {
        let recs: Vec<(u32, LogRecord)> = segs
            .iter()
            .flat_map(|&(seg, salt)| log_records(&pristine, seg, salt).into_iter().map(move |r| (seg, r)))
            .collect();
        let live: Vec<&(u32, LogRecord)> = recs.iter().filter(|(_, r)| model.get(&r.key) == Some(&r.value)).collect();
        // Records past what the levels cover are replayed by recovery, which stops at a bad
        // record as at a torn tail (see l0_log_damage_is_reported_not_silently_truncated).
        let replayed = recs.iter().filter(|(_, r)| r.lsn > covered).count();
        eprintln!(
            "{kind}: {} segments, {} records, {} live, {replayed} past the levels",
            segs.len(),
            recs.len(),
            live.len()
        );
        if recs.is_empty() {
            continue;
        }
        let mut detected = 0;
        for t in 0..trials {
            let (seg, r) = if t % 2 == 0 && !live.is_empty() {
                live[rng.below(live.len() as u64) as usize]
            } else {
                &recs[rng.below(recs.len() as u64) as usize]
            };
            let within = r.off + rng.below(r.len);
            let d = run(kind, *seg, within, &mut rng);
            if kind == "large-log" && model.get(&r.key) == Some(&r.value) && r.lsn <= covered {
                assert!(
                    d.detected(),
                    "{kind} segment {seg}: damage in the live record of {} went unnoticed",
                    show(&r.key)
                );
            }
            detected += d.detected() as usize;
        }
        eprintln!("{kind} flips: {detected}/{trials} detected");
    }
    assert!(!large.is_empty());
}

/// A flip in an SST's Bloom filter header (bit count, probe count) must not make the SST look
/// like it lacks keys it holds. (Until commit 94d4cae the header was outside the filter's
/// checksum: such a flip made gets skip the SST and return older values from deeper levels,
/// resurrect deleted keys, or report present keys absent.)
#[test]
fn bloom_header_damage_never_gives_wrong_answers() {
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let n = 3000;
    let model = {
        let db = Db::open(&pristine, Options::tiny()).unwrap();
        fill_mixed(&db, n)
    };
    let probe: Vec<Vec<u8>> = (0..n).map(key).collect();
    let ssts = layout(&pristine).ssts;
    let nbits = |s: &SstInfo| {
        let (file, base) = seg_file(&pristine, s.seg);
        let b = read_at(&file, base + s.bloom_off as u64, 4);
        u32::from_le_bytes(b.try_into().unwrap())
    };
    let victim = ssts.iter().max_by_key(|s| s.entries).expect("an SST");
    eprintln!("victim: SST in segment {} with {} entries, {} filter bits", victim.seg, victim.entries, nbits(victim));
    let mut failures = Vec::new();
    // Probe count byte (offset 4): 7 probes become 135. Bit count: +1 bit (offset 0), and one
    // block more (bit 1 of byte 1: +512 bits).
    for (field, off, mask) in [("probe count", 4u32, 0x80u8), ("bit count", 0, 0x01), ("block count", 1, 0x02)] {
        let copy = root.path().join(field.replace(' ', "-"));
        copy_dir(&pristine, &copy);
        let (file, base) = seg_file(&copy, victim.seg);
        xor_byte(&file, base + (victim.bloom_off + off) as u64, mask);
        let db = Db::open(&copy, quiet()).unwrap();
        let (mut hidden, mut resurrected, mut stale, mut corrupt) = (Vec::new(), Vec::new(), Vec::new(), 0);
        for k in &probe {
            match (db.get(k), model.get(k)) {
                (Err(Error::Corruption { .. }), _) => corrupt += 1,
                (Err(e), _) => panic!("{field}: get {}: {e}", show(k)),
                (Ok(None), Some(_)) => hidden.push(show(k)),
                (Ok(Some(_)), None) => resurrected.push(show(k)),
                (Ok(Some(v)), Some(w)) if v != *w => stale.push(show(k)),
                _ => {}
            }
        }
        eprintln!(
            "Bloom {field}: {} present keys read as absent, {} deleted keys resurrected, {} older values \
             returned, {corrupt} corruption errors; first of each: {:?} {:?} {:?}",
            hidden.len(),
            resurrected.len(),
            stale.len(),
            hidden.first(),
            resurrected.first(),
            stale.first()
        );
        if corrupt == 0 {
            failures.push(format!("{field}: the damaged filter was never reported"));
        }
        if hidden.len() + resurrected.len() + stale.len() > 0 {
            failures.push(format!(
                "{field}: {} hidden, {} resurrected, {} stale",
                hidden.len(),
                resurrected.len(),
                stale.len()
            ));
        }
    }
    assert!(failures.is_empty(), "after one flipped Bloom header byte: {failures:?}");
}

// ---------------------------------------------------------------------------------------------
// 2. Superblock copies
// ---------------------------------------------------------------------------------------------

/// The generation of a valid superblock copy at `slot` (0 or 4096), None if the copy is invalid.
fn superblock_generation(file: &Path, slot: u64) -> Option<u64> {
    let b = read_at(file, slot, 44);
    let crc = u32::from_le_bytes(b[40..44].try_into().unwrap());
    (&b[..8] == b"HALYARD1" && crc == crc32c::crc32c(&b[..40]))
        .then(|| u64::from_le_bytes(b[24..32].try_into().unwrap()))
}

fn destroy_superblock(file: &Path, slot: u64) {
    let f = OpenOptions::new().write(true).open(file).unwrap();
    f.write_all_at(&[0xA5u8; 4096], slot).unwrap();
    f.sync_all().unwrap();
}

/// A store that went through two sessions, so that both superblock copies are valid, and
/// whose second session wrote data (so segments released at its open were reused).
fn two_session_store(dir: &Path, n: u32) -> Model {
    let mut model = {
        let db = Db::open(dir, Options::tiny()).unwrap();
        fill_mixed(&db, n)
    };
    let db = Db::open(dir, Options::tiny()).unwrap();
    for i in (0..n).step_by(3) {
        let v = value(i, 3);
        db.put(&key(i), &v).unwrap();
        model.insert(key(i), v);
    }
    for i in (1..n).step_by(11) {
        db.delete(&key(i)).unwrap();
        model.remove(&key(i));
    }
    db.compact().unwrap();
    model
}

#[test]
fn superblock_copy_damage_is_survived() {
    let _wd = Watchdog::arm("superblock_copy_damage_is_survived", 300);
    let root = tempfile::tempdir().unwrap();
    let pristine = root.path().join("pristine");
    let n = 2000;
    let model = two_session_store(&pristine, n);
    let probe: Vec<Vec<u8>> = (0..n + 10).map(key).collect();
    let file = pristine.join(DATA_FILE);
    let gens = [superblock_generation(&file, 0), superblock_generation(&file, 4096)];
    eprintln!("superblock generations: slot 0 {:?}, slot 4096 {:?}", gens[0], gens[1]);
    let (Some(g0), Some(g1)) = (gens[0], gens[1]) else { panic!("both superblock copies must be valid: {gens:?}") };
    assert_ne!(g0, g1);
    let (older_slot, newer_slot) = if g0 < g1 { (0, 4096) } else { (4096, 0) };

    // Destroying the older copy: the newer one is used and everything is there.
    let copy = root.path().join("older-destroyed");
    copy_dir(&pristine, &copy);
    destroy_superblock(&copy.join(DATA_FILE), older_slot);
    {
        let db = Db::open(&copy, Options::tiny()).expect("open with the older superblock copy destroyed");
        verify_exact(&db, &model, &probe, "older copy destroyed");
        // The open wrote a new superblock into the destroyed slot; the store keeps working.
        db.put(b"after", b"repair").unwrap();
    }
    let file = copy.join(DATA_FILE);
    assert!(superblock_generation(&file, older_slot).is_some(), "the open rewrote the destroyed copy");
    {
        let db = Db::open(&copy, Options::tiny()).unwrap();
        let mut m = model.clone();
        m.insert(b"after".to_vec(), b"repair".to_vec());
        verify_exact(&db, &m, &probe, "older copy destroyed, reopened");
    }

    // Destroying the newer copy: the older copy names the redo chain that the second session's
    // open released (and then reused). Opening must find all the data or refuse clearly.
    let copy = root.path().join("newer-destroyed");
    copy_dir(&pristine, &copy);
    destroy_superblock(&copy.join(DATA_FILE), newer_slot);
    match Db::open(&copy, Options::tiny()) {
        Err(e @ Error::Corruption { .. }) => eprintln!("newer copy destroyed: open refused: {e}"),
        Err(e) => panic!("newer copy destroyed: open failed without naming the damage: {e:?}"),
        Ok(db) => {
            eprintln!("newer copy destroyed: opened the older checkpoint; regions {:?}", db.regions());
            assert!(!db.regions().is_empty(), "newer copy destroyed: the store opened with no regions, all data gone");
            verify_exact(&db, &model, &probe, "newer copy destroyed");
        }
    }
}

/// A store opened only once has a single valid superblock copy (the other slot was never
/// written). With that copy destroyed, the open must refuse, not format a new, empty store over
/// the data file.
#[test]
fn superblock_single_copy_damage_does_not_reformat() {
    let _wd = Watchdog::arm("superblock_single_copy_damage_does_not_reformat", 120);
    let root = tempfile::tempdir().unwrap();
    let once = root.path().join("once");
    {
        let db = Db::open(&once, Options::tiny()).unwrap();
        for i in 0..3000 {
            db.put(&key(i), &value(i, 0)).unwrap();
        }
        db.compact().unwrap();
    }
    let file = once.join(DATA_FILE);
    let gens = [superblock_generation(&file, 0), superblock_generation(&file, 4096)];
    let slot = if gens[0].is_some() { 0 } else { 4096 };
    eprintln!(
        "superblock copies {gens:?}; data file {} bytes; destroying slot {slot}",
        fs::metadata(&file).unwrap().len()
    );
    destroy_superblock(&file, slot);
    match Db::open(&once, Options::tiny()) {
        Err(e) => eprintln!("open refused: {e}"),
        Ok(db) => {
            let got = db.get(&key(5));
            eprintln!("open succeeded: regions {:?}; get key 5: {got:?}", db.regions());
            assert!(
                matches!(got, Ok(Some(ref v)) if *v == value(5, 0)),
                "opened a store without the data (silently reformatted): get key 5 = {got:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 3. A full device (Options::max_device_bytes)
// ---------------------------------------------------------------------------------------------

#[test]
fn device_full_returns_no_space_and_keeps_data() {
    let _wd = Watchdog::arm("device_full_returns_no_space_and_keeps_data", 120);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { max_device_bytes: Some(40 * SEG), ..Options::tiny() };
    let mut model = Model::new();
    let mut failed_at = None;
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        // 40 segments of 64 KiB hold far less than 20 000 pairs of this mix.
        for i in 0..20_000u32 {
            let (k, v) = (key(i), value(i, 0));
            match db.put(&k, &v) {
                Ok(()) => {
                    model.insert(k, v);
                }
                Err(Error::NoSpace { what }) => {
                    let s = db.stats();
                    eprintln!(
                        "NoSpace after {i} puts: {what}; {} of {} bytes allocated, log segments {:?}",
                        s.space_allocated_bytes, s.file_bytes, s.log_segments
                    );
                    failed_at = Some(i);
                    break;
                }
                Err(e) => panic!("put {i}: expected Ok or NoSpace, got {e}"),
            }
        }
        let failed_at = failed_at.expect("a 40-segment device never reported NoSpace");
        assert!(model.len() > 100, "only {} puts fit", model.len());
        assert!(db.stats().file_bytes <= 40 * SEG, "data file {} past max_device_bytes", db.stats().file_bytes);
        // Further writes fail cleanly too (or succeed if background work freed space), never hang.
        for i in failed_at + 1..failed_at + 20 {
            match db.put(&key(i), &value(i, 0)) {
                Ok(()) => {
                    model.insert(key(i), value(i, 0));
                }
                Err(Error::NoSpace { .. }) => {}
                Err(e) => panic!("put {i} after NoSpace: {e}"),
            }
        }
        let probe: Vec<Vec<u8>> = (0..failed_at + 25).map(key).collect();
        // The key whose put failed is not in the model: it must not be visible either.
        verify_exact(&db, &model, &probe, "device full");
    }
    let db = Db::open(dir.path(), opts).expect("reopen a full store");
    let probe: Vec<Vec<u8>> = (0..failed_at.unwrap() + 25).map(key).collect();
    verify_exact(&db, &model, &probe, "device full, reopened");
}

// ---------------------------------------------------------------------------------------------
// 4 and 6. Real ENOSPC on a small tmpfs
// ---------------------------------------------------------------------------------------------

/// Unmounts on drop (also when the test fails).
struct MountGuard(PathBuf);

impl MountGuard {
    /// Mounts a tmpfs of `size` on `dir`; None (with a message) where that is not possible.
    fn tmpfs(dir: &Path, size: &str) -> Option<MountGuard> {
        let st = Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).output();
        match st {
            Ok(o) if o.status.success() => Some(MountGuard(dir.to_path_buf())),
            Ok(o) => {
                eprintln!("skipping: cannot mount a tmpfs (needs root): {}", String::from_utf8_lossy(&o.stderr).trim());
                None
            }
            Err(e) => {
                eprintln!("skipping: cannot run mount: {e}");
                None
            }
        }
    }
}

impl Drop for MountGuard {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// True for the errors a full file system may cause: NoSpace, or Poisoned by an earlier one.
fn is_full_error(e: &Error) -> bool {
    matches!(e, Error::NoSpace { .. } | Error::Poisoned(_))
}

/// Reads every acknowledged key; `doubt` keys (whose write failed) may hold either value.
fn verify_acked(db: &Db, model: &Model, doubt: &BTreeMap<Vec<u8>, Vec<u8>>, ctx: &str) {
    for (k, v) in model {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)));
        if let Some(d) = doubt.get(k) {
            assert!(got.as_ref() == Some(v) || got.as_ref() == Some(d), "{ctx}: get {} (in doubt)", show(k));
        } else {
            assert!(got.as_ref() == Some(v), "{ctx}: get {} = {:?}", show(k), got.map(|g| g.len()));
        }
    }
    for (k, d) in doubt.iter().filter(|(k, _)| !model.contains_key(*k)) {
        let got = db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)));
        assert!(got.is_none() || got.as_ref() == Some(d), "{ctx}: get {} (in doubt)", show(k));
    }
    let mut n = 0;
    let mut prev: Option<Vec<u8>> = None;
    for r in db.scan(..) {
        let (k, v) = r.unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
        assert!(prev.as_ref().is_none_or(|p| *p < k), "{ctx}: scan out of order at {}", show(&k));
        let ok = model.get(&k) == Some(&v) || doubt.get(&k) == Some(&v);
        assert!(ok, "{ctx}: scan gave an unexpected pair for {}", show(&k));
        n += model.contains_key(&k) as usize;
        prev = Some(k);
    }
    assert_eq!(n, model.len(), "{ctx}: scan missed acknowledged keys");
}

/// After a restart, the writes `first..` (one per key, in LSN order) that survived must be a
/// prefix of them: recovery replays a gap-free prefix of the logs. Returns the prefix length.
fn verify_recovered_prefix(db: &Db, first: u32, written: &[(Vec<u8>, Vec<u8>)], ctx: &str) -> usize {
    let got: Vec<Option<Vec<u8>>> =
        written.iter().map(|(k, _)| db.get(k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(k)))).collect();
    let m = got.iter().take_while(|g| g.is_some()).count();
    for (j, ((k, v), g)) in written.iter().zip(&got).enumerate() {
        if j < m {
            assert!(g.as_ref() == Some(v), "{ctx}: {} recovered with a wrong value", show(k));
        } else {
            assert!(g.is_none(), "{ctx}: write {} of key {} survived but write {} before it was lost", j, show(k), m);
        }
    }
    let last = written.last().map_or_else(|| key(first), |w| w.0.clone());
    let mut scanned = 0;
    for r in db.scan(key(first)..=last) {
        r.unwrap_or_else(|e| panic!("{ctx}: scan: {e}"));
        scanned += 1;
    }
    assert_eq!(scanned, m, "{ctx}: scan of the recovered writes");
    m
}

/// Writes after the first failure: a poisoned store refuses every one with `Poisoned`; otherwise
/// they fail with NoSpace or, when background work found room again, succeed.
fn later_writes_fail(db: &Db, from: u32, poisoned: bool, model: &mut Model) {
    for i in from..from + 20 {
        let (k, v) = (key(i), value(i, 0));
        match db.put(&k, &v) {
            Ok(()) => {
                assert!(!poisoned, "a poisoned store acknowledged put {i}");
                model.insert(k, v);
            }
            Err(e) => {
                assert!(is_full_error(&e), "write after the file system ran full: {e:?}");
                assert!(!poisoned || matches!(e, Error::Poisoned(_)), "poisoned store, later write gave {e:?}");
            }
        }
    }
}

#[test]
fn real_enospc_on_small_tmpfs() {
    let _wd = Watchdog::arm("real_enospc_on_small_tmpfs", 120);
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = MountGuard::tmpfs(dir.path(), "3m") else { return };
    let store = dir.path().join("store");
    let opts = Options { direct_io: true, ..Options::tiny() };
    let db = Db::open(&store, opts.clone()).unwrap();
    eprintln!("direct I/O on tmpfs: {}", db.stats().direct_io);
    let mut model = Model::new();
    let mut doubt = Model::new();
    // Every write attempted, in order (distinct keys): recovery must keep a prefix of them.
    let mut written = Vec::new();
    let mut first = None;
    for i in 0..50_000u32 {
        let (k, v) = (key(i), value(i, 0));
        written.push((k.clone(), v.clone()));
        match db.put(&k, &v) {
            Ok(()) => {
                model.insert(k, v);
            }
            Err(e) => {
                doubt.insert(k, v);
                first = Some((i, e));
                break;
            }
        }
    }
    let (at, e) = first.expect("a 3 MiB tmpfs never filled up");
    eprintln!("first error after {at} puts: {e}; poisoned {}", db.stats().poisoned);
    match &e {
        Error::NoSpace { .. } => {}
        Error::Poisoned(why) => assert!(why.contains("no space"), "poisoned by something else than ENOSPC: {why}"),
        other => panic!("a full file system must give NoSpace, got {other:?}"),
    }
    let poisoned = db.stats().poisoned;
    later_writes_fail(&db, at + 1, poisoned, &mut model);
    verify_acked(&db, &model, &doubt, "tmpfs full");
    drop(db);
    // More room: the store reopens with a prefix of what was written (SyncMode::Group may
    // lose the last acknowledged writes, never an earlier one while keeping a later one).
    let st = Command::new("mount").args(["-o", "remount,size=16m"]).arg(dir.path()).status();
    if !st.is_ok_and(|s| s.success()) {
        eprintln!("cannot grow the tmpfs; skipping the reopen");
        return;
    }
    let db = Db::open(&store, opts).expect("reopen after the file system grew");
    let m = verify_recovered_prefix(&db, 0, &written, "tmpfs full, reopened");
    eprintln!("reopened: {m} of {} acknowledged writes recovered", model.len());
    db.put(b"after", b"recovered").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"recovered".to_vec()));
}

/// A file system filled by another program after the store opened. Writes are paced so that the
/// group-commit thread (SyncMode::Group, every 5 ms) or a compaction is the first to write into a
/// page the file system cannot give: a background failure. Later writes must fail (Poisoned, or
/// NoSpace when compaction reports the full file system), reads keep working, and after space
/// comes back a reopen recovers a prefix of the writes.
#[test]
fn background_failure_poisons_writes() {
    let _wd = Watchdog::arm("background_failure_poisons_writes", 120);
    let dir = tempfile::tempdir().unwrap();
    let Some(_mount) = MountGuard::tmpfs(dir.path(), "16m") else { return };
    let store = dir.path().join("store");
    let opts = Options::tiny();
    let mut model = Model::new();
    let mut doubt = Model::new();
    let mut written = Vec::new();
    let filler = dir.path().join("filler");
    let base = 1500;
    {
        let db = Db::open(&store, opts.clone()).unwrap();
        for i in 0..base {
            db.put(&key(i), &value(i, 0)).unwrap();
            model.insert(key(i), value(i, 0));
        }
        db.compact().unwrap();
        // Another program takes the rest of the file system.
        let mut f = File::create(&filler).unwrap();
        let chunk = vec![0x5Au8; 64 << 10];
        let mut filled = 0u64;
        while f.write_all(&chunk).is_ok() {
            filled += chunk.len() as u64;
            assert!(filled < 64 << 20, "the tmpfs does not fill up");
        }
        let _ = f.sync_all();
        eprintln!("filler took {} KiB", filled >> 10);

        // Medium pairs only: they go to the L0 log, whose tail the commit thread writes out.
        let mut first = None;
        for i in base..base + 20_000 {
            let (k, mut v) = (key(i), value(i, 0));
            v.resize(90, b'm');
            written.push((k.clone(), v.clone()));
            match db.put(&k, &v) {
                Ok(()) => {
                    model.insert(k, v);
                }
                Err(e) => {
                    doubt.insert(k, v);
                    first = Some((i, e));
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (at, e) = first.expect("writes never failed on a full tmpfs");
        let poisoned = db.stats().poisoned;
        eprintln!("first error after {} more puts: {e:?}; poisoned {poisoned}", at - base);
        assert!(is_full_error(&e), "a full file system must give NoSpace or Poisoned, got {e:?}");
        if let Error::Poisoned(why) = &e {
            assert!(why.contains("no space"), "poisoned by something else than ENOSPC: {why}");
        }
        later_writes_fail(&db, at + 1, poisoned, &mut model);
        // Reads keep working.
        verify_acked(&db, &model, &doubt, "after the failure");
    }
    // Space comes back; the reopened store holds everything from before the filler and a
    // prefix of the writes after it.
    fs::remove_file(&filler).unwrap();
    let db = Db::open(&store, opts).expect("reopen after freeing space");
    let before: Model = model.iter().filter(|(k, _)| **k < key(base)).map(|(k, v)| (k.clone(), v.clone())).collect();
    for (k, v) in &before {
        let got = db.get(k).unwrap_or_else(|e| panic!("reopened: get {}: {e}", show(k)));
        assert!(got.as_ref() == Some(v), "reopened: {} (written before the filler) lost", show(k));
    }
    let m = verify_recovered_prefix(&db, base, &written, "reopened: writes after the filler");
    eprintln!("reopened: {m} of {} later acknowledged writes recovered", written.len() - 1);
    db.put(b"after", b"recovered").unwrap();
    assert_eq!(db.get(b"after").unwrap(), Some(b"recovered".to_vec()));
}

// ---------------------------------------------------------------------------------------------
// 5. Concurrent readers and writers while compaction and GC run
// ---------------------------------------------------------------------------------------------

const THREADS: u32 = 4;
const KEYS_PER_THREAD: u64 = 400;
const OPS_PER_THREAD: u32 = 6000;

fn tkey(t: u32, i: u64) -> Vec<u8> {
    format!("t{t}/k{i:05}").into_bytes()
}

/// A value naming its key and version; sizes cycle through small, medium and large.
fn tvalue(t: u32, i: u64, op: u32) -> Vec<u8> {
    const SIZES: [usize; 6] = [8, 90, 700, 20, 150, 400];
    let mut v = format!("t{t}/k{i:05}@{op}:").into_bytes();
    let len = SIZES[op as usize % SIZES.len()].max(v.len());
    v.resize(len, b'0' + (op % 10) as u8);
    v
}

/// A value must name the key it is stored under.
fn value_matches_key(k: &[u8], v: &[u8]) -> bool {
    v.len() > k.len() && v.starts_with(k) && v[k.len()] == b'@'
}

fn worker(db: &Db, t: u32) -> Model {
    let mut rng = Rng::new(1000 + t as u64);
    let mut model = Model::new();
    let lo = format!("t{t}/").into_bytes();
    let hi = format!("t{t}0").into_bytes(); // '0' follows '/'
    for op in 0..OPS_PER_THREAD {
        let i = rng.below(KEYS_PER_THREAD);
        let k = tkey(t, i);
        match rng.below(100) {
            0..=64 => {
                let v = tvalue(t, i, op);
                db.put(&k, &v).unwrap_or_else(|e| panic!("thread {t} put: {e}"));
                model.insert(k, v);
            }
            65..=79 => {
                db.delete(&k).unwrap_or_else(|e| panic!("thread {t} delete: {e}"));
                model.remove(&k);
            }
            _ => {
                let got = db.get(&k).unwrap_or_else(|e| panic!("thread {t} get: {e}"));
                assert_eq!(got.as_ref(), model.get(&k), "thread {t} op {op}: get {}", show(&k));
            }
        }
        if op % 500 == 499 {
            let got: Vec<(Vec<u8>, Vec<u8>)> =
                db.scan(lo.clone()..hi.clone()).map(|r| r.unwrap_or_else(|e| panic!("thread {t} scan: {e}"))).collect();
            assert!(
                got.len() == model.len() && got.iter().zip(&model).all(|(a, b)| (&a.0, &a.1) == (b.0, b.1)),
                "thread {t} op {op}: scan of own keys differs from the model ({} vs {})",
                got.len(),
                model.len()
            );
        }
    }
    model
}

fn verify_threads(db: &Db, models: &[Model], ctx: &str) {
    let mut all = Model::new();
    for (t, m) in models.iter().enumerate() {
        for i in 0..KEYS_PER_THREAD {
            let k = tkey(t as u32, i);
            let got = db.get(&k).unwrap_or_else(|e| panic!("{ctx}: get {}: {e}", show(&k)));
            assert_eq!(got.as_ref(), m.get(&k), "{ctx}: get {}", show(&k));
        }
        all.extend(m.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let got: Vec<(Vec<u8>, Vec<u8>)> = db.scan(..).map(|r| r.unwrap_or_else(|e| panic!("{ctx}: scan: {e}"))).collect();
    assert!(got.len() == all.len() && got.iter().zip(&all).all(|(a, b)| (&a.0, &a.1) == (b.0, b.1)), "{ctx}: scan");
}

#[test]
fn four_threads_read_and_write_during_compaction_and_gc() {
    let _wd = Watchdog::arm("four_threads_read_and_write_during_compaction_and_gc", 300);
    let dir = tempfile::tempdir().unwrap();
    let models: Vec<Model> = {
        let db = Db::open(dir.path(), Options::tiny()).unwrap();
        let finished = AtomicUsize::new(0);
        let mut snapshots = 0;
        let models = std::thread::scope(|s| {
            let handles: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (db, finished) = (&db, &finished);
                    s.spawn(move || {
                        let m = worker(db, t);
                        finished.fetch_add(1, Ordering::SeqCst);
                        m
                    })
                })
                .collect();
            let snapper = s.spawn(|| {
                let mut rounds = 0;
                loop {
                    let done = finished.load(Ordering::SeqCst) == THREADS as usize;
                    let snap = db.snapshot();
                    let mut prev: Option<Vec<u8>> = None;
                    for (n, r) in snap.scan(..).enumerate() {
                        let (k, v) = r.unwrap_or_else(|e| panic!("snapshot scan: {e}"));
                        assert!(
                            prev.as_ref().is_none_or(|p| *p < k),
                            "snapshot scan unsorted or duplicate at {}",
                            show(&k)
                        );
                        assert!(value_matches_key(&k, &v), "snapshot scan: {} holds a value of another key", show(&k));
                        // A snapshot answers gets as its scan does.
                        if n.is_multiple_of(97) {
                            assert_eq!(snap.get(&k).unwrap(), Some(v), "snapshot get vs scan at {}", show(&k));
                        }
                        prev = Some(k);
                    }
                    rounds += 1;
                    if done {
                        return rounds;
                    }
                }
            });
            let models: Vec<Model> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            snapshots = snapper.join().unwrap();
            models
        });
        let s = db.stats();
        eprintln!(
            "snapshot rounds {snapshots}; compactions {}, trivial moves {}, medium merged {}, gc runs {}, \
             gc segments {}, stalls {:.2}s",
            s.compactions, s.trivial_moves, s.medium_merged, s.gc_runs, s.gc_segments, s.stall_seconds
        );
        assert!(s.compactions > 0, "no compaction ran");
        assert!(snapshots > 0);
        verify_threads(&db, &models, "after the threads");
        db.compact().unwrap();
        let freed = db.gc().unwrap();
        eprintln!("explicit gc freed {freed} segments; large garbage {} bytes", db.stats().large_garbage_bytes);
        verify_threads(&db, &models, "after compact and gc");
        models
    };
    let db = Db::open(dir.path(), Options::tiny()).unwrap();
    verify_threads(&db, &models, "after reopen");
}

// ---------------------------------------------------------------------------------------------
// Engine bugs found by the tests above, reduced to deterministic reproducers (the ignored ones
// still fail; the others are fixed and stay as regression tests)
// ---------------------------------------------------------------------------------------------

/// GC of a large-log segment that holds a damaged record must not free the valid records after
/// it. (Before commit 88a7614, GC's record scan stopped at the first bad record, moved only the
/// records before it and freed the whole segment: once the segment was reused, the intact
/// values behind the damaged record were gone — 29 of 87 keys in this reproducer.)
#[test]
fn gc_does_not_drop_records_after_a_damaged_one() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    let big = |i: u32, round: u32| {
        let mut v = format!("big{round}-{i}-").into_bytes();
        v.resize(700, b'L');
        v
    };
    let n = 200;
    let mut model = Model::new();
    {
        let db = Db::open(&dir, quiet()).unwrap();
        for i in 0..n {
            db.put(&key(i), &big(i, 0)).unwrap();
            model.insert(key(i), big(i, 0));
        }
        // Garbage in the first large-log segment so that GC picks it.
        for i in 0..20 {
            db.put(&key(i), &big(i, 1)).unwrap();
            model.insert(key(i), big(i, 1));
        }
        db.compact().unwrap();
    }
    let large = layout(&dir).large;
    let (seg, salt) = large[0];
    // Damage one byte in the value of a live record two thirds into the segment.
    let recs = log_records(&dir, seg, salt);
    let victim = &recs[recs.len() * 2 / 3];
    assert_eq!(model.get(&victim.key), Some(&victim.value), "the victim record is live");
    let (file, base) = seg_file(&dir, seg);
    xor_byte(&file, base + victim.off + victim.len / 2, 0x10);
    let after: Vec<String> = recs[recs.len() * 2 / 3 + 1..].iter().map(|r| show(&r.key)).collect();
    eprintln!(
        "large-log segment {seg}: {} records; damaged the one of {}; intact records after it: {}..={}",
        recs.len(),
        show(&victim.key),
        after[0],
        after[after.len() - 1]
    );
    // GC runs (explicitly) with the default threshold now.
    let db = Db::open(&dir, Options { gc_interval_ms: 3_600_000, ..Options::tiny() }).unwrap();
    let gc = db.gc();
    eprintln!("gc after the flip: {gc:?} (segments freed)");
    // New large values reuse whatever GC freed.
    for i in n..n + 400 {
        db.put(&key(i), &big(i, 0)).unwrap();
        model.insert(key(i), big(i, 0));
    }
    db.compact().unwrap();
    let mut lost = Vec::new();
    for (k, v) in &model {
        match db.get(k) {
            Ok(got) => assert_eq!(got.as_ref(), Some(v), "wrong value for {}", show(k)),
            Err(Error::Corruption { .. }) => lost.push(show(k)),
            Err(e) => panic!("get {}: {e}", show(k)),
        }
    }
    // Exactly one record was damaged; at most its key may be unreadable.
    assert!(lost.len() <= 1, "{} keys unreadable after one flipped byte: {:?}", lost.len(), lost);
}

/// NoSpace says "delete data, let garbage collection run, or raise Options::max_device_bytes".
/// Deleting must be possible on a full device, or the store can never get out of that state.
#[test]
#[ignore = "known limit: deletes on a full device work (they may use the compaction reserve) until an L0->L1 \
            compaction needs more free segments than the reserve holds: it writes its whole output before its \
            inputs are freed. Fix: range-partitioned L0->L1 commits (free inputs as output is published)"]
fn device_full_store_still_takes_deletes() {
    let _wd = Watchdog::arm("device_full_store_still_takes_deletes", 120);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { max_device_bytes: Some(40 * SEG), ..Options::tiny() };
    let db = Db::open(dir.path(), opts.clone()).unwrap();
    let mut n = 0;
    while n < 20_000 {
        match db.put(&key(n), &value(n, 0)) {
            Ok(()) => n += 1,
            Err(Error::NoSpace { what }) => {
                eprintln!("put {n}: NoSpace ({what})");
                break;
            }
            Err(e) => panic!("put {n}: {e}"),
        }
    }
    // L0 goes to the levels: no L0-log segment stays in use.
    db.flush().unwrap();
    db.compact().unwrap();
    let s = db.stats();
    eprintln!(
        "{n} pairs ({} user bytes) hold {} of 40 segments: SSTs per level {:?}, log segments {:?}",
        s.user_bytes_written,
        s.space_allocated_bytes / SEG,
        s.levels.iter().map(|l| l.ssts).collect::<Vec<_>>(),
        s.log_segments
    );
    // Delete everything, letting flush, compaction and GC run between rounds, and reopening
    // once when a round makes no progress.
    let mut db = Some(db);
    let (mut next, mut reopened) = (0, false);
    while next < n {
        let d = db.as_ref().unwrap();
        let before = next;
        while next < n {
            match d.delete(&key(next)) {
                Ok(()) => next += 1,
                Err(Error::NoSpace { .. }) => break,
                Err(e) => panic!("delete {next}: {e}"),
            }
        }
        let (f, c, g) = (d.flush(), d.compact(), d.gc());
        if next == before {
            eprintln!("stuck at delete {next} of {n} (flush {f:?}, compact {c:?}, gc {g:?}); reopened {reopened}");
            if reopened {
                break;
            }
            drop(db.take());
            match Db::open(dir.path(), opts.clone()) {
                Ok(d) => db = Some(d),
                Err(e) => panic!("stuck at delete {next} of {n}, and the full store no longer opens: {e:?}"),
            }
            reopened = true;
        }
    }
    assert_eq!(next, n, "on a full device, deleting stopped for good at key {next} of {n}");
    drop(db);
    Db::open(dir.path(), opts).expect("reopen after deleting everything");
}

/// Recovery replays the L0 log up to the first record that fails its checks, as it would up to a
/// torn tail. A damaged record in the middle of the log, followed by intact durable records,
/// is not a torn tail: every acknowledged write after it disappears without an error.
#[test]
fn l0_log_damage_is_reported_not_silently_truncated() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("store");
    let n = 500;
    {
        let db = Db::open(&dir, Options { sync: SyncMode::Always, ..quiet() }).unwrap();
        for i in 0..n {
            db.put(&key(i), &value(i * 5, 0)).unwrap(); // small pairs: they stay in L0
        }
    }
    let db = Db::open(&dir, quiet()).unwrap();
    let segs = db.replication().log_segments(0, LogKind::L0).unwrap();
    drop(db);
    let (seg, salt) = segs[0];
    let recs = log_records(&dir, seg, salt);
    let victim = recs.iter().find(|r| r.key == key(100)).expect("the record of key 100");
    let (file, base) = seg_file(&dir, seg);
    xor_byte(&file, base + victim.off + victim.len / 2, 0x10);
    match Db::open(&dir, quiet()) {
        Err(e) => eprintln!("open refused the damaged log: {e}"),
        Ok(db) => {
            let missing: Vec<u32> = (0..n).filter(|&i| !matches!(db.get(&key(i)), Ok(Some(_)))).collect();
            eprintln!(
                "opened; {} keys missing without any error: {:?}..{:?}; stats: {} records dropped by recovery",
                missing.len(),
                missing.first(),
                missing.last(),
                db.stats().recovery_dropped_records
            );
            assert!(missing.len() <= 1, "{} intact, durable writes lost after one damaged byte", missing.len());
        }
    }
}

/// The superblock records how many data files the segments are spread over; a store with one of
/// them missing is refused with a corruption error that says so, and nothing is created or
/// formatted in its place. With the file back, the store opens whatever `data_files` asks.
#[test]
fn a_missing_data_file_is_refused_not_reformatted() {
    let _wd = Watchdog::arm("a_missing_data_file_is_refused_not_reformatted", 120);
    let dir = tempfile::tempdir().unwrap();
    let opts = Options { data_files: 4, ..Options::tiny() };
    {
        let db = Db::open(dir.path(), opts.clone()).unwrap();
        for i in 0..3000 {
            db.put(&key(i), &value(i, 0)).unwrap();
        }
        db.compact().unwrap();
    }
    let files = halyard_engine::data_files(dir.path());
    assert_eq!(files.len(), 4, "{files:?}");
    for gone in [1, 3] {
        let saved = dir.path().join("saved");
        fs::rename(&files[gone], &saved).unwrap();
        match Db::open(dir.path(), opts.clone()) {
            Err(Error::Corruption { what, .. }) => assert!(what.contains("4 data files"), "file {gone}: {what}"),
            Err(e) => panic!("file {gone} missing: open failed without naming the damage: {e:?}"),
            Ok(_) => panic!("file {gone} missing: the store opened"),
        }
        assert_eq!(halyard_engine::data_files(dir.path()).len(), gone, "nothing was created in its place");
        fs::rename(&saved, &files[gone]).unwrap();
    }
    let db = Db::open(dir.path(), Options { data_files: 1, ..Options::tiny() }).unwrap();
    for i in 0..3000 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i, 0)), "key {i}");
    }
    assert_eq!(halyard_engine::data_files(dir.path()).len(), 4);
}
