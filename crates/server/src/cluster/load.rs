//! Load-based splits (issue: a hot key range stays on one primary): each region this node leads
//! counts its requests, and while it takes more than `--split-load-ops` requests a second it
//! samples the keys it is asked for, CockroachDB's way: a reservoir of [`RESERVOIR`] keys, each
//! counting the requests below it and at or above it since it was drawn. Once the region has
//! stayed that hot for `split_load_secs`, the sample that parts the requests most evenly is
//! the split key, if it parts them evenly enough ([`MAX_IMBALANCE`]): a region whose load is one
//! hot key finds no such key and never splits in a loop (each side of any cut holds the key or
//! not, so one side gets nearly all of it).
//!
//! The node reports the key with its progress (`progress.rs`), beside the size splits; the
//! master splits there and its hot-region balancing hands one half's primary role away.
//!
//! The counters live outside the region map (rebuilt on every map change) and are looked up
//! once per rebuild: a request pays one atomic add while its region is cool, and a short lock
//! and at most [`RESERVOIR`] key comparisons while it is hot. A region whose bounds change (it
//! split) starts again with fresh counters, so a new half must stay hot a whole window itself.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Keys kept in a hot region's sample.
pub(crate) const RESERVOIR: usize = 20;

/// A region hot for this many windows without a key samples afresh.
const RESAMPLE_WINDOWS: u32 = 3;

/// A sample must have seen this many requests before it may be chosen: fewer say little.
const MIN_COUNTED: u64 = 100;

/// The largest |below - above| / (below + above) a split key may leave: each side gets at
/// least 37.5% of the requests.
const MAX_IMBALANCE: f64 = 0.25;

/// When a region splits by load.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LoadSplit {
    /// Requests a second above which a region is hot (0: never split by load).
    pub(crate) ops: u64,
    /// How long a region must stay hot before it splits.
    pub(crate) window: Duration,
}

/// One sampled key: the requests for keys below it and at or above it since it was drawn.
#[derive(Debug)]
struct Sample {
    key: Vec<u8>,
    below: u64,
    above: u64,
}

/// The reservoir of a hot region's requested keys.
#[derive(Debug, Default)]
pub(crate) struct Finder {
    samples: Vec<Sample>,
    seen: u64,
    rng: u64,
}

impl Finder {
    /// Counts a request for `key` against every sample, and draws it into the reservoir with
    /// probability RESERVOIR / requests seen.
    pub(crate) fn record(&mut self, key: &[u8]) {
        self.seen += 1;
        for s in &mut self.samples {
            match key < s.key.as_slice() {
                true => s.below += 1,
                false => s.above += 1,
            }
        }
        let fresh = || Sample { key: key.to_vec(), below: 0, above: 0 };
        if self.samples.len() < RESERVOIR {
            self.samples.push(fresh());
            return;
        }
        // xorshift64*: a cheap, good enough draw; the seed only has to differ from zero.
        let mut x = self.rng.max(0x9E37_79B9_7F4A_7C15);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        let j = x.wrapping_mul(0x2545_F491_4F6C_DD1D) % self.seen;
        if let Some(s) = usize::try_from(j).ok().and_then(|j| self.samples.get_mut(j)) {
            *s = fresh();
        }
    }

    /// The sampled key that parts the requests most evenly, if it parts them evenly enough.
    pub(crate) fn key(&self) -> Option<&[u8]> {
        let score = |s: &Sample| s.below.abs_diff(s.above) as f64 / (s.below + s.above) as f64;
        self.samples
            .iter()
            .filter(|s| s.below + s.above >= MIN_COUNTED && s.below > 0)
            .map(|s| (score(s), s))
            .filter(|(x, _)| *x <= MAX_IMBALANCE)
            .min_by(|a, b| a.0.total_cmp(&b.0))
            .map(|(_, s)| s.key.as_slice())
    }
}

/// One led region's load.
#[derive(Debug, Default)]
pub(crate) struct RegionLoad {
    /// Requests since the last tick.
    ops: AtomicU64,
    /// The region is hot: requests are sampled.
    sampling: AtomicBool,
    finder: Mutex<Finder>,
    /// Since when the region has been hot (ticks only).
    hot_since: Mutex<Option<Instant>>,
}

impl RegionLoad {
    /// Counts a request for `key` (an engine key of the region).
    pub(crate) fn record(&self, key: &[u8]) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        if self.sampling.load(Ordering::Relaxed) {
            self.finder.lock().record(key);
        }
    }

    /// Ends a tick of `secs` seconds: the requests a second since the last, and the key to
    /// split at when the region has been hot for the whole window and a key parts its load.
    fn tick(&self, secs: f64, now: Instant, rule: LoadSplit) -> (u64, Option<Vec<u8>>) {
        let rate = (self.ops.swap(0, Ordering::Relaxed) as f64 / secs.max(1e-3)).round() as u64;
        let mut since = self.hot_since.lock();
        if rule.ops == 0 || rate < rule.ops {
            *since = None;
            self.sampling.store(false, Ordering::Relaxed);
            return (rate, None);
        }
        let start = *since.get_or_insert_with(|| {
            *self.finder.lock() = Finder::default();
            self.sampling.store(true, Ordering::Relaxed);
            now
        });
        let hot_for = now.duration_since(start);
        let key = (hot_for >= rule.window).then(|| self.finder.lock().key().map(<[u8]>::to_vec)).flatten();
        if key.is_none() && hot_for >= rule.window * RESAMPLE_WINDOWS {
            // Hot for long with no key: the samples may be those of a load that has moved on
            // (a reservoir takes new keys ever more rarely), so it starts over. One hot key
            // still never splits: no sample of any reservoir parts its load.
            *self.finder.lock() = Finder::default();
            *since = Some(now);
        }
        (rate, key)
    }
}

/// A region's counters with the bounds they count for.
#[derive(Clone)]
struct Counted {
    start: Vec<u8>,
    end: Option<Vec<u8>>,
    load: Arc<RegionLoad>,
}

/// The load of every region this node leads, by id, with the bounds it was counted for.
#[derive(Default)]
pub(crate) struct LoadTable {
    regions: Mutex<HashMap<u32, Counted>>,
    last_tick: Mutex<Option<Instant>>,
}

impl LoadTable {
    /// The counters of region `id` over `start..end`: the ones it had, unless its bounds
    /// changed (a split or merge), which starts it afresh.
    pub(crate) fn of(&self, id: u32, start: &[u8], end: Option<&[u8]>) -> Arc<RegionLoad> {
        let mut m = self.regions.lock();
        match m.get(&id).filter(|c| c.start == start && c.end.as_deref() == end) {
            Some(c) => c.load.clone(),
            None => {
                let load = Arc::new(RegionLoad::default());
                m.insert(id, Counted { start: start.to_vec(), end: end.map(<[u8]>::to_vec), load: load.clone() });
                load
            }
        }
    }

    /// Forgets every region but `keep` (those still led here).
    pub(crate) fn retain(&self, keep: impl Fn(u32) -> bool) {
        self.regions.lock().retain(|id, _| keep(*id));
    }

    /// Ends a tick for every region counted: requests a second by region, and the key to
    /// split each region at that has been hot for the window (cut by `cut`, kept only when it
    /// lies inside the region past its first key).
    pub(crate) fn tick(&self, rule: LoadSplit, cut: impl Fn(&[u8]) -> Vec<u8>) -> Vec<(u32, u64, Option<Vec<u8>>)> {
        let now = Instant::now();
        let secs = self.last_tick.lock().replace(now).map_or(1.0, |t| now.duration_since(t).as_secs_f64());
        let regions: Vec<(u32, Counted)> = self.regions.lock().iter().map(|(id, c)| (*id, c.clone())).collect();
        regions
            .into_iter()
            .map(|(id, c)| {
                let (rate, key) = c.load.tick(secs, now, rule);
                let inside = |k: &Vec<u8>| *k > c.start && c.end.as_ref().is_none_or(|e| k < e);
                (id, rate, key.map(|k| cut(&k)).filter(inside))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feed(f: &mut Finder, keys: impl Iterator<Item = Vec<u8>>) {
        for k in keys {
            f.record(&k);
        }
    }

    fn key(i: u64) -> Vec<u8> {
        format!("k{i:06}").into_bytes()
    }

    /// Uniform requests over a range are parted near its middle.
    #[test]
    fn uniform_load_splits_near_the_middle() {
        let mut f = Finder::default();
        feed(&mut f, (0..20_000u64).map(|i| key((i * 7919) % 1000)));
        let k = f.key().expect("a key parts uniform load");
        assert!(k > key(300).as_slice() && k < key(700).as_slice(), "{}", String::from_utf8_lossy(k));
    }

    /// Two hot keys are parted from each other.
    #[test]
    fn two_hot_keys_are_parted() {
        let mut f = Finder::default();
        feed(&mut f, (0..10_000u64).map(|i| if i % 2 == 0 { key(10) } else { key(900) }));
        let k = f.key().expect("a key parts two hot keys");
        assert!(k > key(10).as_slice() && k <= key(900).as_slice());
    }

    /// One hot key taking most requests gives no split key: any cut leaves it on one side.
    #[test]
    fn one_hot_key_never_splits() {
        let mut f = Finder::default();
        feed(&mut f, (0..20_000u64).map(|i| if i % 10 < 7 { key(500) } else { key((i * 31) % 1000) }));
        assert_eq!(f.key(), None);
    }

    /// Too few requests give no key.
    #[test]
    fn few_requests_give_no_key() {
        let mut f = Finder::default();
        feed(&mut f, (0..50u64).map(key));
        assert_eq!(f.key(), None);
    }

    /// A region splits only after it stayed hot for the window; cooling down starts over.
    #[test]
    fn a_region_must_stay_hot_for_the_window() {
        let rule = LoadSplit { ops: 100, window: Duration::from_secs(10) };
        let l = RegionLoad::default();
        let t0 = Instant::now();
        let hot = |l: &RegionLoad| (0..2000u64).for_each(|i| l.record(&key((i * 7919) % 1000)));
        hot(&l);
        assert_eq!(l.tick(1.0, t0, rule), (2000, None), "the first hot tick starts sampling");
        hot(&l);
        assert_eq!(l.tick(1.0, t0 + Duration::from_secs(5), rule).1, None, "hot, not for the window yet");
        hot(&l);
        assert!(l.tick(1.0, t0 + Duration::from_secs(10), rule).1.is_some(), "hot for the window");
        l.record(&key(1));
        assert_eq!(l.tick(1.0, t0 + Duration::from_secs(11), rule), (1, None), "cool again");
        hot(&l);
        assert_eq!(l.tick(1.0, t0 + Duration::from_secs(12), rule).1, None, "the window starts over");
    }

    /// A load that moved on (one hot key, then uniform requests) is found once the reservoir
    /// starts over: its old samples, all of the hot key, part nothing.
    #[test]
    fn a_load_that_moved_on_is_sampled_afresh() {
        let rule = LoadSplit { ops: 100, window: Duration::from_secs(2) };
        let l = RegionLoad::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        (0..50_000u64).for_each(|_| l.record(&key(500)));
        assert_eq!(l.tick(1.0, at(0), rule).1, None, "the first hot tick starts sampling");
        (0..50_000u64).for_each(|_| l.record(&key(500)));
        assert_eq!(l.tick(1.0, at(2), rule).1, None, "one hot key parts nothing");
        let uniform = |l: &RegionLoad| (0..2000u64).for_each(|i| l.record(&key((i * 7919) % 1000)));
        uniform(&l);
        assert_eq!(l.tick(1.0, at(6), rule).1, None, "the samples were drawn from the hot key: none fits yet");
        uniform(&l);
        assert_eq!(l.tick(1.0, at(7), rule).1, None, "sampling afresh: not for a window yet");
        uniform(&l);
        let k = l.tick(1.0, at(9), rule).1.expect("a key once a window of the new load was sampled");
        assert!(k > key(250) && k < key(750), "{:?}", String::from_utf8_lossy(&k));
    }

    /// The table keeps a region's counters while its bounds stay, and starts afresh when they
    /// change; keys outside the region or at its start are not proposed.
    #[test]
    fn the_table_follows_bounds() {
        let t = LoadTable::default();
        let a = t.of(1, b"", None);
        assert!(Arc::ptr_eq(&a, &t.of(1, b"", None)));
        let b = t.of(1, b"", Some(b"m"));
        assert!(!Arc::ptr_eq(&a, &b), "a narrowed region counts afresh");
        let rule = LoadSplit { ops: 1, window: Duration::ZERO };
        (0..1000u64).for_each(|i| b.record(&key(i % 100)));
        let _ = t.tick(rule, <[u8]>::to_vec);
        (0..1000u64).for_each(|i| b.record(&key(i % 100)));
        let got = t.tick(rule, |_| b"z".to_vec());
        assert_eq!(got.len(), 1);
        assert_eq!(got.first().and_then(|g| g.2.clone()), None, "a cut past the region's end is dropped");
    }
}
