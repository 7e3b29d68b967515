//! The store: opening and recovery, routing to regions, background work, the public API.

pub(crate) mod checkpoint;
mod reshape;
mod size;

/// A region's estimated size (`Db::split_points`): (id, bytes, the key it splits at when it
/// should).
pub type SizeEstimate = (u32, u64, Option<Vec<u8>>);
pub(crate) mod stats;

use crate::catalog::manifest::{self, Manifest};
use crate::catalog::{Catalog, Edit};
use crate::device::alloc::Allocator;
use crate::device::{Device, Storage};
use crate::error::{Error, Result};
use crate::options::{Options, SyncMode};
use crate::placement::compaction;
use crate::placement::gc;
use crate::region::iter::RegionScan;
use crate::region::recovery;
use crate::region::shared::Shared;
use crate::region::write::Op;
use crate::region::Region;
use crate::tree::cache::Cache;
use crate::tree::memtable::Memtable;
use crate::tree::sst::ReadCtx;
use crate::tree::view::View;
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeMap, VecDeque};
use std::fs::File;
use std::ops::{Bound, RangeBounds};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Name of the first data file inside the store's directory; the others (see
/// `Options::data_files`) are `data.hly.1`, `data.hly.2`, ... Segment 0, with the superblock,
/// is always in the first.
pub const DATA_FILE: &str = "data.hly";

/// Present in a store's directory while the store is being created (until its first
/// superblock is durable): a store found with it never held anything.
const CREATING: &str = "creating";

/// Makes a directory's entries (a file created or removed in it) durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(Error::io("syncing the store directory"))
}

/// The data files of the store in directory `dir`, first to last, as found on disk: what a copy
/// of a closed store must take, and what holds its bytes on disk.
pub fn data_files(dir: impl AsRef<Path>) -> Vec<PathBuf> {
    crate::device::data_files_on_disk(&dir.as_ref().join(DATA_FILE))
}

pub(crate) struct DbInner {
    pub sh: Arc<Shared>,
    pub regions: RwLock<BTreeMap<u32, Arc<Region>>>,
    /// The same regions for routing: read on every operation without a lock or a reference
    /// count change, replaced whenever `regions` changes.
    routes: arc_swap::ArcSwap<Vec<Arc<Region>>>,
    /// One split or merge at a time (`reshape.rs`).
    reshaping: Mutex<()>,
    path: PathBuf,
    _lock: Option<File>,
}

impl DbInner {
    /// Puts region objects in place (new or rebuilt) and takes out the regions `gone`, at
    /// once for the routes.
    pub(crate) fn install_regions(&self, regions: Vec<Arc<Region>>, gone: &[u32]) {
        let mut g = self.regions.write();
        for id in gone {
            if let Some(old) = g.remove(id) {
                old.mark_retired();
            }
        }
        for r in regions {
            // The object replaced is out of service for good (GC passes that listed it skip it).
            if let Some(old) = g.insert(r.id(), r) {
                old.mark_retired();
            }
        }
        self.routes.store(Arc::new(g.values().cloned().collect()));
    }
}

/// How long a write waits for the split or merge of its region to end before it reports
/// [`Error::RegionChanged`] (a split holds writers for as long as its last flush takes).
const RESHAPE_WAIT: Duration = Duration::from_secs(30);

/// An open store. Cheap to share across threads by reference (`&Db` is `Sync`); closes on drop.
pub struct Db {
    pub(crate) inner: Arc<DbInner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// An atomic group of writes (within one region).
#[derive(Default, Debug, Clone)]
pub struct WriteBatch {
    ops: Vec<BatchOp>,
}

#[derive(Debug, Clone)]
enum BatchOp {
    /// Key, value, expiry time (0: never).
    Put(Vec<u8>, Vec<u8>, u64),
    Delete(Vec<u8>),
    /// First key, first key past the range.
    DeleteRange(Vec<u8>, Vec<u8>),
}

impl BatchOp {
    fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put(k, ..) | BatchOp::Delete(k) | BatchOp::DeleteRange(k, _) => k,
        }
    }
}

impl WriteBatch {
    /// An empty batch.
    pub fn new() -> WriteBatch {
        WriteBatch::default()
    }
    /// Adds a put.
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(BatchOp::Put(key.into(), value.into(), 0));
        self
    }
    /// Adds a put that no reader sees from `expire_at` on (milliseconds since the Unix epoch,
    /// as [`Db::now_ms`] counts them; 0 = never). An absolute time, so that every copy of the
    /// pair expires at the same moment.
    pub fn put_expiring(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>, expire_at: u64) -> &mut Self {
        self.ops.push(BatchOp::Put(key.into(), value.into(), expire_at));
        self
    }
    /// Adds a delete.
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(BatchOp::Delete(key.into()));
        self
    }
    /// Adds a delete of every key in `[start, end)`: one record however many keys it covers.
    /// The range must lie within one region, as every write of a batch.
    pub fn delete_range(&mut self, start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> &mut Self {
        self.ops.push(BatchOp::DeleteRange(start.into(), end.into()));
        self
    }
    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    /// The keys written, in order (the first key of a range delete).
    pub fn keys(&self) -> impl Iterator<Item = &[u8]> {
        self.ops.iter().map(BatchOp::key)
    }
    fn as_ops(&self) -> Vec<Op<'_>> {
        self.ops
            .iter()
            .map(|op| match op {
                BatchOp::Put(k, v, at) => Op::Put(k, v, *at),
                BatchOp::Delete(k) => Op::Delete(k),
                BatchOp::DeleteRange(s, e) => Op::DeleteRange(s, e),
            })
            .collect()
    }
}

/// Direction and length of a scan.
#[derive(Clone, Copy, Debug, Default)]
pub struct ScanOptions {
    /// Descending key order.
    pub reverse: bool,
    /// At most this many pairs.
    pub limit: Option<usize>,
}

/// An ordered iterator of `(key, value)` pairs. It sees the store as of its creation.
pub struct Scan {
    parts: VecDeque<RegionScan>,
    remaining: usize,
}

impl Iterator for Scan {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        while self.remaining > 0 {
            let part = self.parts.front_mut()?;
            match part.next() {
                Some(Ok(kv)) => {
                    self.remaining -= 1;
                    return Some(Ok(kv));
                }
                Some(Err(e)) => {
                    self.remaining = 0;
                    return Some(Err(e));
                }
                None => {
                    self.parts.pop_front();
                }
            }
        }
        None
    }
}

/// A consistent read-only view of the store at one moment, per region.
pub struct Snapshot {
    parts: Vec<(Arc<Region>, Arc<View>, u64)>,
}

/// A key range for scans: `..`, `a..b`, `a..=b`, `a..`, `..b`, `..=b` over anything that is
/// `AsRef<[u8]>` (`&[u8]`, `Vec<u8>`, `&str`, byte string literals), or a pair of `Bound`s.
pub trait KeyRange {
    /// Lower and upper bound.
    fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>);
}

fn owned<K: AsRef<[u8]>>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

impl KeyRange for std::ops::RangeFull {
    fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
        (Bound::Unbounded, Bound::Unbounded)
    }
}

macro_rules! key_range {
    ($($t:ty),*) => {$(
        impl<K: AsRef<[u8]>> KeyRange for $t {
            fn into_bounds(self) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
                (owned(self.start_bound()), owned(self.end_bound()))
            }
        }
    )*};
}
key_range!(
    std::ops::Range<K>,
    std::ops::RangeInclusive<K>,
    std::ops::RangeFrom<K>,
    std::ops::RangeTo<K>,
    std::ops::RangeToInclusive<K>,
    (Bound<K>, Bound<K>)
);

/// Does region [start, end) intersect the bounds?
fn overlaps(r: &Region, lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    let below_end = match lo {
        Bound::Unbounded => true,
        Bound::Included(k) | Bound::Excluded(k) => r.end().as_ref().is_none_or(|e| k < e),
    };
    let above_start = match hi {
        Bound::Unbounded => true,
        Bound::Included(k) => k.as_slice() >= r.start().as_slice(),
        Bound::Excluded(k) => k.as_slice() > r.start().as_slice(),
    };
    below_end && above_start
}

fn scan_parts(
    parts: &[(Arc<Region>, Arc<View>, u64)],
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    opts: ScanOptions,
) -> Scan {
    let mut v: VecDeque<RegionScan> = parts
        .iter()
        .filter(|(r, _, _)| overlaps(r, &lo, &hi))
        .map(|(r, view, snap)| {
            RegionScan::new(r.clone(), view.clone(), *snap, lo.clone(), hi.clone(), opts.reverse, opts.limit)
        })
        .collect();
    if opts.reverse {
        v = v.into_iter().rev().collect();
    }
    Scan { parts: v, remaining: opts.limit.unwrap_or(usize::MAX) }
}

impl Snapshot {
    fn part(&self, key: &[u8]) -> Result<&(Arc<Region>, Arc<View>, u64)> {
        self.parts.iter().find(|(r, _, _)| r.contains(key)).ok_or(Error::NoRegionForKey)
    }
    /// The value of `key` as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let (r, v, s) = self.part(key)?;
        r.get_at(v, *s, key)
    }
    /// A scan as of the snapshot.
    pub fn scan<R: KeyRange>(&self, range: R) -> Scan {
        self.scan_with(range, ScanOptions::default())
    }
    /// A scan as of the snapshot, with direction and limit.
    pub fn scan_with<R: KeyRange>(&self, range: R, opts: ScanOptions) -> Scan {
        let (lo, hi) = range.into_bounds();
        scan_parts(&self.parts, lo, hi, opts)
    }
    /// The LSN the snapshot sees up to, per region id.
    pub fn lsns(&self) -> Vec<(u32, u64)> {
        self.parts.iter().map(|(r, _, s)| (r.id(), *s)).collect()
    }
}

/// How long an open waits for the directory's lock before answering [`Error::Locked`]. A
/// child process this process starts shares the lock file's descriptor between its fork and
/// its exec: a store closed and reopened meanwhile finds the lock still held for that while
/// (milliseconds on a loaded machine), which is no other owner.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

fn lock_dir(path: &Path) -> Result<File> {
    let f = File::create(path.join("LOCK")).map_err(Error::io("creating the lock file"))?;
    let deadline = std::time::Instant::now() + LOCK_WAIT;
    // SAFETY: flock on a valid descriptor has no memory effects.
    while unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        if std::time::Instant::now() >= deadline {
            return Err(Error::Locked(path.display().to_string()));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Ok(f)
}

impl Db {
    /// Opens the store in directory `path`, creating it if `opts.create_if_missing`, and
    /// recovers it after a crash.
    pub fn open(path: impl AsRef<Path>, opts: Options) -> Result<Db> {
        let started = std::time::Instant::now();
        opts.validate()?;
        let path = path.as_ref().to_path_buf();
        std::fs::create_dir_all(&path).map_err(Error::io("creating the store directory"))?;
        let lock = lock_dir(&path)?;
        let file = path.join(DATA_FILE);
        let marker = path.join(CREATING);
        if marker.exists() {
            // A creation that did not finish (the process died before the first superblock
            // was durable): the files hold nothing yet. Remove them and create again, rather
            // than refuse a file without a superblock forever.
            for f in data_files(&path) {
                std::fs::remove_file(&f).map_err(Error::io("removing an unfinished store's data file"))?;
            }
        }
        if !file.exists() && !opts.create_if_missing {
            return Err(Error::InvalidOptions(format!(
                "no store at {}; set Options::create_if_missing",
                path.display()
            )));
        }
        if !file.exists() {
            std::fs::write(&marker, b"").map_err(Error::io("marking the store's creation"))?;
            sync_dir(&path)?;
        }
        let dev = Device::open_store(&file, opts.data_files, opts.seg_bits(), opts.direct_io)?;
        let db = Db::open_device(dev, opts, path.clone(), Some(lock), started)?;
        if marker.exists() {
            std::fs::remove_file(&marker).map_err(Error::io("ending the store's creation"))?;
            sync_dir(&path)?;
        }
        Ok(db)
    }

    /// Opens the store held by `storage` (see [`Storage`]): an in-memory store, or one whose
    /// storage fails on a plan. `Options::segment_bytes` must match the storage's segments;
    /// `data_files` and `direct_io` do not apply. [`Db::path`] is empty.
    pub fn open_on(storage: Arc<dyn Storage>, opts: Options) -> Result<Db> {
        let started = std::time::Instant::now();
        opts.validate()?;
        if storage.seg_bits() != opts.seg_bits() {
            return Err(Error::InvalidOptions(format!(
                "the storage has {}-byte segments; set Options::segment_bytes to match",
                1u64 << storage.seg_bits()
            )));
        }
        if storage.len().map_err(Error::io("reading the storage's size"))? == 0 && !opts.create_if_missing {
            return Err(Error::InvalidOptions("no store in this storage; set Options::create_if_missing".into()));
        }
        Db::open_device(Device::new(storage), opts, PathBuf::new(), None, started)
    }

    fn open_device(dev: Device, opts: Options, path: PathBuf, lock: Option<File>, started: Instant) -> Result<Db> {
        let dev = Arc::new(dev);
        let loaded = manifest::load(&dev)?;
        let (mut catalog, prev, chain) = match loaded {
            Some(l) => {
                if l.sb.node_bytes as usize != opts.node_bytes {
                    return Err(Error::Incompatible(format!(
                        "store made with {}-byte nodes; open it with Options::node_bytes = {}",
                        l.sb.node_bytes, l.sb.node_bytes
                    )));
                }
                (l.catalog, Some(l.sb), l.chain)
            }
            None => {
                let mut c = Catalog::default();
                if opts.default_region {
                    c.apply(0, &[Edit::CreateRegion { start: Vec::new(), end: None, backup: false }]);
                }
                (c, None, Vec::new())
            }
        };
        let alloc =
            Arc::new(Allocator::new(dev.clone(), opts.max_device_bytes, &manifest::segments_in_use(&catalog, &chain))?);
        let mut replayed = Vec::new();
        let mut dropped = 0;
        let how = recovery::How::Open { tolerate_damage: opts.tolerate_log_damage, resume: opts.resume_logs };
        for (&id, meta) in &catalog.regions {
            let rec = recovery::replay(&dev, meta, how)?;
            dropped += rec.dropped;
            replayed.push((id, rec));
        }
        for (id, rec) in &replayed {
            catalog.apply(*id, &rec.edits);
        }
        let manifest = Manifest::create(dev.clone(), alloc.clone(), catalog, prev, opts.node_bytes as u32, &chain)?;
        let ctx = ReadCtx {
            dev: dev.clone(),
            // Rows and log values (hundreds of bytes) share the budget with nodes.
            cache: Cache::new(opts.cache_bytes, 1024),
            node_bytes: opts.node_bytes,
        };
        let sh = Arc::new(Shared::new(opts, dev, alloc, manifest, ctx));
        sh.counters.recovery_dropped.store(dropped, Relaxed);
        let mut regions = BTreeMap::new();
        for (id, rec) in replayed {
            let Some(meta) = sh.manifest.region(id) else {
                continue;
            };
            let r = Region::new(id, &meta, sh.clone(), rec.mem, rec.last + 1);
            r.resume(rec.resume, rec.large_bytes);
            r.set_quiet(sh.opts.open_quiet && !meta.backup);
            regions.insert(id, Arc::new(r));
        }
        let c = &sh.counters;
        c.open_read_bytes.store(sh.dev.counters().total_read(), Relaxed);
        c.open_micros.store(started.elapsed().as_micros() as u64, Relaxed);
        let routes = arc_swap::ArcSwap::from_pointee(regions.values().cloned().collect());
        let inner = Arc::new(DbInner {
            sh,
            regions: RwLock::new(regions),
            routes,
            reshaping: Mutex::new(()),
            path,
            _lock: lock,
        });
        let db = Db { inner, threads: Mutex::new(Vec::new()) };
        db.start_threads();
        Ok(db)
    }

    fn start_threads(&self) {
        let mut t = self.threads.lock();
        let o = &self.inner.sh.opts;
        if o.warm_cache && o.cache_bytes > 0 {
            // Before any thread that writes records (GC's moves) starts: what recovery left.
            let opened: Vec<(Arc<Region>, u64)> =
                self.inner.regions.read().values().map(|r| (r.clone(), r.lsn())).collect();
            let inner = self.inner.clone();
            t.push(spawn("halyard-warm".into(), move || warm_worker(&inner, &opened)));
        }
        for i in 0..o.compaction_threads {
            let inner = self.inner.clone();
            t.push(spawn(format!("halyard-compact-{i}"), move || compaction_worker(&inner)));
        }
        let inner = self.inner.clone();
        t.push(spawn("halyard-gc".into(), move || gc_worker(&inner)));
        if o.sync == SyncMode::Group {
            let inner = self.inner.clone();
            t.push(spawn("halyard-commit".into(), move || commit_worker(&inner)));
        }
    }

    /// The directory of the store.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The options the store runs with.
    pub fn options(&self) -> &Options {
        &self.inner.sh.opts
    }

    pub(crate) fn route(&self, key: &[u8]) -> Result<Arc<Region>> {
        self.inner.routes.load().iter().find(|r| r.contains(key)).cloned().ok_or(Error::NoRegionForKey)
    }

    /// Runs `f` on the region holding `key` (the hot path: no lock, no reference count);
    /// again on the key's new region when a split or merge retired the one it found.
    fn on_region<T>(&self, key: &[u8], f: impl Fn(&Region) -> Result<T>) -> Result<T> {
        self.rerouted(|| {
            let routes = self.inner.routes.load();
            let r = routes.iter().find(|r| r.contains(key)).ok_or(Error::NoRegionForKey)?;
            f(r)
        })
    }

    /// Stores `value` under `key`.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.on_region(key, |r| r.write(&[Op::Put(key, value, 0)]).map(|_| ()))
    }

    /// Stores `value` under `key` until `expire_at` (see [`WriteBatch::put_expiring`]).
    pub fn put_expiring(&self, key: &[u8], value: &[u8], expire_at: u64) -> Result<()> {
        self.on_region(key, |r| r.write(&[Op::Put(key, value, expire_at)]).map(|_| ()))
    }

    /// Stores `value` under `key` for `ttl` from now.
    pub fn put_with_ttl(&self, key: &[u8], value: &[u8], ttl: std::time::Duration) -> Result<()> {
        let at = self.now_ms().saturating_add(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)).max(1);
        self.put_expiring(key, value, at)
    }

    /// The store's clock: milliseconds since the Unix epoch ([`Options::clock`] when set).
    pub fn now_ms(&self) -> u64 {
        self.inner.sh.now_ms()
    }

    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.on_region(key, |r| r.get(key))
    }

    /// The value of `key` and when it expires (ms since the Unix epoch; 0: never).
    pub fn get_with_expiry(&self, key: &[u8]) -> Result<Option<(Vec<u8>, u64)>> {
        self.on_region(key, |r| r.get_with_expiry(key))
    }

    /// An upper bound of the LSN of `key`'s newest version, visible yet or not: every read of
    /// the key that returned before this call saw nothing newer, and every write of it that
    /// returned is at or below it. What a replicated read must wait for, and no more.
    pub fn read_bound(&self, key: &[u8]) -> Result<u64> {
        self.on_region(key, |r| Ok(r.read_bound(key)))
    }

    /// Removes `key`.
    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.on_region(key, |r| r.write(&[Op::Delete(key)]).map(|_| ()))
    }

    /// Removes every key in `[start, end)`. Within a region it is one record, atomic and
    /// independent of the number of keys; a range over several regions is one delete per
    /// region, each atomic on its own.
    pub fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<()> {
        if end <= start {
            return Err(Error::EmptyRange);
        }
        // A part deleted again after a split is deleted no less.
        self.rerouted(|| self.delete_range_once(start, end))
    }

    fn delete_range_once(&self, start: &[u8], end: &[u8]) -> Result<()> {
        let mut parts: Vec<Arc<Region>> = self.inner.regions.read().values().cloned().collect();
        parts.sort_by(|a, b| a.start().cmp(b.start()));
        for r in parts {
            let from = start.max(r.start().as_slice());
            let to = r.end().as_deref().map_or(end, |e| end.min(e));
            if from < to && !r.is_backup() {
                r.write(&[Op::DeleteRange(from, to)])?;
            }
        }
        Ok(())
    }

    /// Applies a batch atomically: after a crash either all of it or none of it is there.
    pub fn write(&self, batch: &WriteBatch) -> Result<()> {
        let Some(first) = batch.keys().next() else {
            return Ok(());
        };
        self.rerouted(|| {
            let r = self.route(first)?;
            for k in batch.keys() {
                if !r.contains(k) {
                    let other = self.route(k)?;
                    return Err(Error::BatchSpansRegions(r.id(), other.id()));
                }
            }
            r.write(&batch.as_ops()).map(|_| ())
        })
    }

    /// Runs `f` again while it finds a region a split or merge retired (for up to
    /// [`RESHAPE_WAIT`]): the routes name the new regions once it is done.
    fn rerouted<T>(&self, f: impl Fn() -> Result<T>) -> Result<T> {
        // No clock read on the hot path: only once a region turned out retired.
        let mut deadline = None;
        loop {
            match f() {
                Err(Error::RegionChanged(id)) => {
                    let until = *deadline.get_or_insert_with(|| Instant::now() + RESHAPE_WAIT);
                    if Instant::now() >= until {
                        return Err(Error::RegionChanged(id));
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                out => return out,
            }
        }
    }

    /// Every region's current view and LSN.
    fn capture(&self) -> Vec<(Arc<Region>, Arc<View>, u64)> {
        let regions: Vec<Arc<Region>> = self.inner.regions.read().values().cloned().collect();
        // Hold every writer still so that the parts are taken at one moment.
        let guards: Vec<_> = regions.iter().map(|r| r.w().lock()).collect();
        let parts = regions.iter().map(|r| (r.clone(), r.view(), r.read_snap())).collect();
        drop(guards);
        let mut parts: Vec<(Arc<Region>, Arc<View>, u64)> = parts;
        parts.sort_by(|a, b| a.0.start().cmp(b.0.start()));
        parts
    }

    /// A forward scan over `range`.
    pub fn scan<R: KeyRange>(&self, range: R) -> Scan {
        self.scan_with(range, ScanOptions::default())
    }

    /// A scan over `range` with direction and limit.
    pub fn scan_with<R: KeyRange>(&self, range: R, opts: ScanOptions) -> Scan {
        let (lo, hi) = range.into_bounds();
        scan_parts(&self.capture(), lo, hi, opts)
    }

    /// A snapshot: reads through it see the store as of now, whatever happens later.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot { parts: self.capture() }
    }

    fn regions_list(&self) -> Vec<Arc<Region>> {
        self.inner.regions.read().values().cloned().collect()
    }

    /// Makes every acknowledged write durable and writes L0 into L1 (waiting for it).
    pub fn flush(&self) -> Result<()> {
        // A region split or merged meanwhile hands its L0 to its successors: they are flushed
        // in the next pass. A quiet region's merge would wait for its wake: its L0 stays in
        // its log.
        loop {
            let list = self.regions_list();
            for r in list.iter().filter(|r| !r.is_backup() && !r.is_quiet()) {
                r.flush()?;
            }
            if !list.iter().any(|r| r.is_replaced()) {
                return Ok(());
            }
        }
    }

    /// Flushes region `id`, then runs its compactions until no level is over its budget and
    /// its range deletes (a split's among them) are applied: what [`Db::merge_regions`] asks
    /// of both regions.
    pub fn compact_region(&self, id: u32) -> Result<()> {
        let r = self.inner.get(id)?;
        if r.is_backup() {
            return Err(Error::BackupRegion(id));
        }
        r.flush()?;
        loop {
            self.inner.sh.check()?;
            if let Some(job) = compaction::pick_with(&r, true) {
                compaction::run(&r, job)?;
            } else if compaction::running(&r) || r.view().imm.is_some() {
                std::thread::sleep(Duration::from_millis(5));
            } else {
                return Ok(());
            }
        }
    }

    /// Flushes, then runs compactions until no level is over its budget.
    pub fn compact(&self) -> Result<()> {
        self.flush()?;
        loop {
            self.inner.sh.check()?;
            let mut ran = false;
            let mut busy = false;
            for r in self.regions_list() {
                if let Some(job) = compaction::pick_with(&r, true) {
                    compaction::run(&r, job)?;
                    ran = true;
                } else if compaction::running(&r) || r.view().imm.is_some() {
                    busy = true;
                }
            }
            if !ran && !busy {
                return Ok(());
            }
            if !ran {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }

    /// Runs one garbage-collection pass now. Returns the number of large-log segments freed.
    pub fn gc(&self) -> Result<usize> {
        let mut n = 0;
        for r in self.regions_list() {
            match gc::run(&r) {
                Ok(k) => n += k,
                // Handed off during the pass: its next primary collects.
                Err(Error::RegionFenced(_)) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    /// Creates a region for keys in `[start, end)` (`end` None = no upper limit).
    pub fn create_region(&self, id: u32, start: &[u8], end: Option<&[u8]>) -> Result<RegionHandle> {
        self.create_region_with(id, start, end, false)
    }

    pub(crate) fn create_region_with(
        &self,
        id: u32,
        start: &[u8],
        end: Option<&[u8]>,
        backup: bool,
    ) -> Result<RegionHandle> {
        if end.is_some_and(|e| e <= start) {
            return Err(Error::InvalidOptions("region end must be greater than its start".into()));
        }
        let mut g = self.inner.regions.write();
        if g.contains_key(&id) {
            return Err(Error::RegionExists(id));
        }
        if let Some(r) = g.values().find(|r| !r.disjoint(start, end)) {
            return Err(Error::RegionOverlap { new: id, existing: r.id() });
        }
        let sh = &self.inner.sh;
        sh.check()?;
        let edit = Edit::CreateRegion { start: start.to_vec(), end: end.map(<[u8]>::to_vec), backup };
        if let Err(e) = sh.manifest.commit(id, &[edit]) {
            return sh.fail(e);
        }
        let meta = sh.manifest.region(id).ok_or(Error::NoSuchRegion(id))?;
        let r = Arc::new(Region::new(id, &meta, sh.clone(), Memtable::new(), 1));
        g.insert(id, r.clone());
        self.inner.routes.store(Arc::new(g.values().cloned().collect()));
        Ok(RegionHandle { region: r })
    }

    /// Swaps in a rebuilt region object (a backup promoted to primary).
    pub(crate) fn replace_region(&self, r: Arc<Region>) {
        self.install_regions(vec![r], &[]);
    }

    pub(crate) fn install_regions(&self, regions: Vec<Arc<Region>>, gone: &[u32]) {
        self.inner.install_regions(regions, gone);
    }

    /// A handle on one region.
    pub fn region(&self, id: u32) -> Result<RegionHandle> {
        Ok(RegionHandle { region: self.inner.get(id)? })
    }

    /// Ids and key ranges of all regions.
    pub fn regions(&self) -> Vec<RegionInfo> {
        self.regions_list()
            .iter()
            .map(|r| RegionInfo {
                id: r.id(),
                start: r.start().clone(),
                end: r.end().clone(),
                backup: r.is_backup(),
                lsn: r.lsn(),
                quiet: r.is_quiet(),
            })
            .collect()
    }

    /// Lets background work (compaction, GC, size splits, the flush at close) at a region
    /// opened quiet ([`Options::open_quiet`]) again; a region that is not quiet is left as
    /// it is.
    pub fn wake_region(&self, id: u32) -> Result<()> {
        let r = self.inner.get(id)?;
        if r.is_quiet() {
            r.set_quiet(false);
            self.inner.sh.wake();
        }
        Ok(())
    }
}

/// Describes a region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionInfo {
    /// Id.
    pub id: u32,
    /// First key.
    pub start: Vec<u8>,
    /// First key past the region.
    pub end: Option<Vec<u8>>,
    /// Replication backup.
    pub backup: bool,
    /// Last LSN written.
    pub lsn: u64,
    /// Opened quiet and not woken yet ([`Options::open_quiet`]).
    pub quiet: bool,
}

/// Operations on one region.
#[derive(Clone)]
pub struct RegionHandle {
    pub(crate) region: Arc<Region>,
}

impl RegionHandle {
    /// The region's id.
    pub fn id(&self) -> u32 {
        self.region.id()
    }
    /// Stores `value` under `key` (which must lie in the region). Returns the write's LSN.
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        self.region.write(&[Op::Put(key, value, 0)])
    }
    /// Removes `key`. Returns the write's LSN.
    pub fn delete(&self, key: &[u8]) -> Result<u64> {
        self.region.write(&[Op::Delete(key)])
    }
    /// Removes every key of `[start, end)` (within the region) in one record. Returns the
    /// write's LSN.
    pub fn delete_range(&self, start: &[u8], end: &[u8]) -> Result<u64> {
        self.region.write(&[Op::DeleteRange(start, end)])
    }
    /// Applies a batch atomically. Returns the LSN of its last write.
    pub fn write(&self, batch: &WriteBatch) -> Result<u64> {
        self.region.write(&batch.as_ops())
    }
    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.region.get(key)
    }
    /// An upper bound of the LSN of `key`'s newest version (see [`Db::read_bound`]).
    pub fn read_bound(&self, key: &[u8]) -> u64 {
        self.region.read_bound(key)
    }
    /// A scan of the region.
    pub fn scan_with<R: KeyRange>(&self, range: R, opts: ScanOptions) -> Scan {
        let (lo, hi) = range.into_bounds();
        let r = &self.region;
        let view = r.view();
        let snap = r.read_snap();
        scan_parts(&[(r.clone(), view, snap)], lo, hi, opts)
    }
    /// A forward scan of the region that yields each pair's version (the LSN that wrote it);
    /// replicas of a region agree on versions as well as values.
    pub fn scan_versions<R: KeyRange>(&self, range: R) -> crate::region::iter::VersionedScan {
        let (lo, hi) = range.into_bounds();
        let r = &self.region;
        let view = r.view();
        let snap = r.read_snap();
        crate::region::iter::VersionedScan(crate::region::iter::RegionScan::new(
            r.clone(),
            view,
            snap,
            lo,
            hi,
            false,
            None,
        ))
    }
    /// A snapshot of the region.
    pub fn snapshot(&self) -> Snapshot {
        let r = &self.region;
        let view = r.view();
        let snap = r.read_snap();
        Snapshot { parts: vec![(r.clone(), view, snap)] }
    }
    /// Last LSN written.
    pub fn lsn(&self) -> u64 {
        self.region.lsn()
    }
    /// Stops the region's writes for a handoff: once this returns, writes fail with
    /// [`Error::RegionFenced`] and no LSN past the returned one (the last assigned; it may
    /// still be becoming visible) is taken, until [`RegionHandle::unfence`].
    pub fn fence(&self) -> u64 {
        self.region.set_fenced(true)
    }
    /// Lifts [`RegionHandle::fence`] (the handoff was rolled back or failed).
    pub fn unfence(&self) {
        self.region.set_fenced(false);
    }
    /// Makes the region's acknowledged writes durable and writes its L0 into L1, waiting for
    /// it (a primary about to hand the region off: the new primary then rebuilds a small L0).
    /// Returns the LSN of a mark written after the merge's edits left for the backups: a
    /// backup that acknowledged it holds them too.
    pub fn flush(&self) -> Result<u64> {
        if self.region.is_backup() {
            return Err(Error::BackupRegion(self.region.id()));
        }
        if self.region.is_replaced() {
            return Err(Error::RegionChanged(self.region.id()));
        }
        self.region.flush()?;
        // The merge ships its edits just after its output is visible (`publish`), and
        // backups acknowledge LSNs of log records only. Without the mark, a new primary
        // promoted before the edits arrived rebuilt all of L0 from the log, and the backups
        // that took them then differed from it and took a full copy.
        let t0 = std::time::Instant::now();
        while compaction::l0_running(&self.region) && t0.elapsed() < std::time::Duration::from_secs(2) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        self.region.write(&[Op::Mark])
    }
}

#[expect(clippy::panic, reason = "as std::thread::spawn: a store without its background threads cannot work")]
fn spawn(name: String, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    match std::thread::Builder::new().name(name).spawn(f) {
        Ok(h) => h,
        Err(e) => panic!("cannot start a background thread: {e}"),
    }
}

fn wait(inner: &DbInner, ms: u64) {
    let mut g = inner.sh.work.lock();
    if !inner.sh.shutdown.load(Relaxed) {
        inner.sh.work_cv.wait_for(&mut g, Duration::from_millis(ms));
    }
}

/// Runs `f`, turning a panic into poison: every later write fails with the reason.
fn guarded(inner: &DbInner, what: &str, f: impl FnOnce() -> Result<()>) -> Result<()> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            inner.sh.poison(format!("{what} panicked: {msg}"));
            Err(Error::Poisoned(msg))
        }
    }
}

/// Warms the cache once after open (`Options::warm_cache`) with the regions as recovery left
/// them (each with its last LSN then). A damaged segment is left for the reads that reach it
/// to report.
fn warm_worker(inner: &DbInner, regions: &[(Arc<Region>, u64)]) {
    let stop = || inner.sh.shutdown.load(Relaxed) || inner.sh.is_poisoned();
    for (r, opened_at) in regions.iter().filter(|(r, _)| !r.is_backup()) {
        let warmed = guarded(inner, "cache warm-up", || crate::region::warm::warm_region(r, *opened_at, &stop));
        if let Err(e) = warmed {
            tracing::warn!("warming the cache with region {} stopped: {e}", r.id());
        }
        if stop() {
            return;
        }
    }
}

fn compaction_worker(inner: &DbInner) {
    while !inner.sh.shutdown.load(Relaxed) {
        if inner.sh.is_poisoned() {
            wait(inner, 200);
            continue;
        }
        let regions: Vec<Arc<Region>> = inner.regions.read().values().cloned().collect();
        let job = regions.iter().filter(|r| !r.is_quiet()).find_map(|r| compaction::pick(r).map(|j| (r.clone(), j)));
        let Some((r, job)) = job else {
            wait(inner, 200);
            continue;
        };
        match guarded(inner, "compaction", || compaction::run(&r, job)) {
            Ok(()) => r.set_no_space(false),
            Err(Error::NoSpace { .. }) => {
                r.set_no_space(true);
                wait(inner, 200);
            }
            Err(Error::Closed) => {}
            Err(e) => inner.sh.poison(format!("compaction failed: {e}")),
        }
    }
}

fn gc_worker(inner: &DbInner) {
    while !inner.sh.shutdown.load(Relaxed) {
        // Other threads wake workers often (every L0 switch); GC runs on its own period.
        let until = std::time::Instant::now() + Duration::from_millis(inner.sh.opts.gc_interval_ms);
        while !inner.sh.shutdown.load(Relaxed) {
            let left = until.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            wait(inner, left.as_millis().max(1) as u64);
        }
        if inner.sh.shutdown.load(Relaxed) || inner.sh.is_poisoned() {
            continue;
        }
        let regions: Vec<Arc<Region>> = inner.regions.read().values().cloned().collect();
        for r in regions.into_iter().filter(|r| !r.is_quiet()) {
            match guarded(inner, "garbage collection", || gc::run(&r).map(|_| ())) {
                Ok(())
                | Err(Error::NoSpace { .. } | Error::Closed | Error::RegionChanged(_) | Error::RegionFenced(_)) => {}
                Err(e) => inner.sh.poison(format!("garbage collection failed: {e}")),
            }
        }
        // A split that cannot run now (writes raced it, no space) is tried on the next pass;
        // a device failure has poisoned the store already.
        let _ = guarded(inner, "a size split", || inner.split_oversized().map(|_| ()));
    }
}

fn commit_worker(inner: &DbInner) {
    let period = Duration::from_millis(inner.sh.opts.group_commit_ms.max(1));
    while !inner.sh.shutdown.load(Relaxed) {
        std::thread::sleep(period);
        let regions: Vec<Arc<Region>> = inner.regions.read().values().cloned().collect();
        for r in regions.iter().filter(|r| !r.is_backup()) {
            let _ = r.sync_to(r.lsn());
        }
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // A clean close leaves at most one L0 table's worth of log for the next open to read,
        // and a pass of GC: a store that is open only briefly (a command-line tool, a service
        // restarted often) never reaches the background pass's period.
        if !self.inner.sh.is_poisoned() {
            for r in self.regions_list().iter().filter(|r| !r.is_backup() && !r.is_quiet()) {
                if r.flush_on_close() {
                    if let Err(e) = r.flush() {
                        tracing::warn!("closing: region {} not flushed ({e}); the next open replays its logs", r.id());
                    }
                }
                if let Err(e) = gc::run(r) {
                    tracing::warn!("closing: garbage collection of region {} failed ({e})", r.id());
                }
            }
        }
        self.inner.sh.shutdown.store(true, Relaxed);
        self.inner.sh.wake();
        for r in self.regions_list() {
            r.wake_writers();
        }
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
        if !self.inner.sh.is_poisoned() {
            for r in self.regions_list().iter().filter(|r| !r.is_backup()) {
                let _ = r.sync_to(u64::MAX);
            }
        }
    }
}
