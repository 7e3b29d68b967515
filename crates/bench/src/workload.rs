//! YCSB workloads: key names, request distributions, KV size mixes and the per-thread
//! operation generator.
//!
//! The generators follow YCSB's `CoreWorkload` so that figures compare with published ones:
//! keys are `"user"` + FNV-1a-64 of the record number (so Load A inserts in hashed, not
//! sorted, order), Zipfian is YCSB's `ScrambledZipfianGenerator` and `latest` its
//! `SkewedLatestGenerator`. YCSB-CXX's scheme (Parallax's own harness) is there too: keys
//! that are the bare decimal FNV-64 of the record number ([`KeyScheme::Fnv`]) and value
//! sizes that cycle per thread (the `ycsb-cxx-*` mixes).

#![expect(clippy::indexing_slicing, reason = "key and value pools are indexed modulo their sizes")]

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::fmt;

/// Bytes of every key: "user" + 20 zero-padded digits (the widest u64).
pub const KEY_BYTES: usize = 24;
/// KV pair sizes of the S, M and L categories (Tebis Table 2; docs/design.md §5).
pub const PAIR_BYTES: [usize; 3] = [33, 148, 1228];
/// Longest scan of Run E (YCSB's default `maxscanlength`).
pub const MAX_SCAN: usize = 100;
/// Zipfian constant of YCSB.
pub const ZIPF_THETA: f64 = 0.99;
/// Value sizes of the S, M and L categories of YCSB-CXX's mixes (its `parallax_db.h`).
pub const YCSB_CXX_VALUE_BYTES: [usize; 3] = [5, 100, 2000];

/// A YCSB workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// Insert `records` pairs.
    #[serde(rename = "load-a")]
    LoadA,
    /// 50% reads, 50% updates.
    #[serde(rename = "run-a")]
    RunA,
    /// 95% reads, 5% updates.
    #[serde(rename = "run-b")]
    RunB,
    /// Reads only.
    #[serde(rename = "run-c")]
    RunC,
    /// 95% reads of the latest keys, 5% inserts.
    #[serde(rename = "run-d")]
    RunD,
    /// 95% scans of 1..100 pairs, 5% inserts.
    #[serde(rename = "run-e")]
    RunE,
    /// 50% reads, 50% read-modify-writes.
    #[serde(rename = "run-f")]
    RunF,
    /// Updates only: Nova-LSM's write-only mix (W100), its skew experiment's other half.
    #[serde(rename = "run-w")]
    RunW,
    /// Reads every record written so far once and checks its value's size: the misses
    /// are lost keys (after `--reopen-between-phases`, the store as reopened).
    #[serde(rename = "verify")]
    Verify,
}

impl Workload {
    /// All workloads.
    pub const ALL: [Workload; 9] = [
        Workload::LoadA,
        Workload::RunA,
        Workload::RunB,
        Workload::RunC,
        Workload::RunD,
        Workload::RunE,
        Workload::RunF,
        Workload::RunW,
        Workload::Verify,
    ];

    /// Name as on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::LoadA => "load-a",
            Workload::RunA => "run-a",
            Workload::RunB => "run-b",
            Workload::RunC => "run-c",
            Workload::RunD => "run-d",
            Workload::RunE => "run-e",
            Workload::RunF => "run-f",
            Workload::RunW => "run-w",
            Workload::Verify => "verify",
        }
    }

    /// Parses a name.
    pub fn parse(s: &str) -> Result<Workload, String> {
        let l = s.to_ascii_lowercase();
        Workload::ALL.into_iter().find(|w| w.name() == l).ok_or_else(|| {
            format!(
                "unknown workload `{s}` (expected load-a, run-a, run-b, run-c, run-d, run-e, run-f, run-w or verify)"
            )
        })
    }

    /// Whether the workload adds new keys (so the key space grows).
    pub fn inserts(self) -> bool {
        self.insert_percent() > 0
    }

    /// Percentage of the operations that insert a new record (YCSB's `insertproportion`).
    pub fn insert_percent(self) -> u64 {
        match self {
            Workload::LoadA => 100,
            Workload::RunD | Workload::RunE => 5,
            _ => 0,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Request distribution over existing keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dist {
    /// Scrambled Zipfian, constant 0.99.
    Zipfian,
    /// Uniform.
    Uniform,
    /// Zipfian over recency: the newest keys are the most popular.
    Latest,
    /// Zipfian (0.99) over the records in key order: the most popular keys are the smallest
    /// and adjacent, so they start in one region of a cluster (Nova-LSM's skewed workload).
    /// Keys in the ycsb scheme's order.
    Ordered,
}

impl Dist {
    /// Parses a name.
    pub fn parse(s: &str) -> Result<Dist, String> {
        match s.to_ascii_lowercase().as_str() {
            "zipfian" => Ok(Dist::Zipfian),
            "uniform" => Ok(Dist::Uniform),
            "latest" => Ok(Dist::Latest),
            "zipfian-ordered" => Ok(Dist::Ordered),
            _ => Err(format!("unknown --dist `{s}` (expected zipfian, zipfian-ordered, uniform or latest)")),
        }
    }
}

/// A KV size mix: percentages of S, M and L pairs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Mix {
    /// Name (S, M, L, SD, MD, LD, custom:s,m,l or ycsb-cxx-sd|md|ld).
    pub name: String,
    /// Percent of S, M, L pairs; sums to 100.
    pub percent: [u32; 3],
    /// YCSB-CXX's mixes: the categories of ten writes in a row, repeated by each thread
    /// (its thread-local counter modulo 10), values of [`YCSB_CXX_VALUE_BYTES`]. `None`:
    /// categories are drawn at random and pairs are [`PAIR_BYTES`] long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cycle: Option<[u8; 10]>,
}

/// The categories of YCSB-CXX's `choose_wl`: six of the main size, two of the next and two
/// of the last, in that order.
const fn ycsb_cxx_cycle(main: u8, next: u8, last: u8) -> [u8; 10] {
    [main, main, main, main, main, main, next, next, last, last]
}

impl Mix {
    /// Parses a mix name.
    pub fn parse(s: &str) -> Result<Mix, String> {
        let cycle = match s.to_ascii_lowercase().as_str() {
            "ycsb-cxx-sd" => Some(ycsb_cxx_cycle(0, 1, 2)),
            "ycsb-cxx-md" => Some(ycsb_cxx_cycle(1, 0, 2)),
            "ycsb-cxx-ld" => Some(ycsb_cxx_cycle(2, 0, 1)),
            _ => None,
        };
        if let Some(c) = cycle {
            let mut percent = [0u32; 3];
            for cat in c {
                percent[cat as usize] += 10;
            }
            return Ok(Mix { name: s.to_ascii_lowercase(), percent, cycle });
        }
        let percent = match s.to_ascii_uppercase().as_str() {
            "S" => [100, 0, 0],
            "M" => [0, 100, 0],
            "L" => [0, 0, 100],
            "SD" => [60, 20, 20],
            "MD" => [20, 60, 20],
            "LD" => [20, 20, 60],
            u if u.starts_with("CUSTOM:") => custom_percent(s)?,
            _ => {
                return Err(format!(
                    "unknown mix `{s}` (expected S, M, L, SD, MD, LD, custom:S%,M%,L% or ycsb-cxx-sd|md|ld)"
                ))
            }
        };
        let name = if s.to_ascii_lowercase().starts_with("custom:") {
            format!("custom:{},{},{}", percent[0], percent[1], percent[2])
        } else {
            s.to_ascii_uppercase()
        };
        Ok(Mix { name, percent, cycle: None })
    }

    /// Draws a size category (0 = S, 1 = M, 2 = L). `writes` counts the calling thread's
    /// draws, for the cyclic mixes.
    pub fn draw(&self, rng: &mut impl Rng, writes: &mut u64) -> u8 {
        if let Some(c) = &self.cycle {
            let cat = c[(*writes % 10) as usize];
            *writes += 1;
            return cat;
        }
        let x = rng.gen_range(0..100u32);
        if x < self.percent[0] {
            0
        } else if x < self.percent[0] + self.percent[1] {
            1
        } else {
            2
        }
    }

    /// Bytes of the value of a pair of category `cat`.
    pub fn value_bytes(&self, cat: u8) -> usize {
        let cat = cat as usize % 3;
        match self.cycle {
            Some(_) => YCSB_CXX_VALUE_BYTES[cat],
            None => PAIR_BYTES[cat] - KEY_BYTES,
        }
    }
}

fn custom_percent(s: &str) -> Result<[u32; 3], String> {
    let parts: Vec<&str> = s["custom:".len()..].split(',').map(|p| p.trim().trim_end_matches('%')).collect();
    let bad = || format!("bad mix `{s}`: expected custom:S%,M%,L% with three percentages summing to 100");
    if parts.len() != 3 {
        return Err(bad());
    }
    let mut p = [0u32; 3];
    for (d, x) in p.iter_mut().zip(&parts) {
        *d = x.parse().map_err(|_| bad())?;
    }
    if p.iter().sum::<u32>() != 100 {
        return Err(bad());
    }
    Ok(p)
}

/// How a record number becomes a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyScheme {
    /// YCSB's: "user" + FNV-64 made non-negative, zero-padded to 20 digits (24 B).
    Ycsb,
    /// YCSB-CXX's: the bare decimal FNV-64 of the record number (1..=20 B, 19.4 on average).
    Fnv,
}

impl KeyScheme {
    /// Parses `--keys`.
    pub fn parse(s: &str) -> Result<KeyScheme, String> {
        match s.to_ascii_lowercase().as_str() {
            "ycsb" => Ok(KeyScheme::Ycsb),
            "fnv" => Ok(KeyScheme::Fnv),
            _ => Err(format!("unknown --keys `{s}` (expected ycsb or fnv)")),
        }
    }

    /// Writes the key of record `n` to the front of `out`; returns its length.
    pub fn write(self, n: u64, out: &mut [u8; KEY_BYTES]) -> usize {
        match self {
            KeyScheme::Ycsb => {
                key(n, out);
                KEY_BYTES
            }
            KeyScheme::Fnv => {
                let mut h = fnv64_unsigned(n);
                let digits = h.checked_ilog10().map_or(1, |d| d as usize + 1);
                for i in (0..digits).rev() {
                    out[i] = b'0' + (h % 10) as u8;
                    h /= 10;
                }
                digits
            }
        }
    }
}

/// YCSB's `Utils.fnvhash64`: FNV-1a over the 8 little-endian bytes, made non-negative.
pub fn fnv64(v: u64) -> u64 {
    // Java's Math.abs on a long.
    (fnv64_unsigned(v) as i64).wrapping_abs() as u64
}

/// YCSB-CXX's `utils::FNVHash64`: the same hash, kept unsigned.
pub fn fnv64_unsigned(mut v: u64) -> u64 {
    let mut h: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        h ^= v & 0xff;
        h = h.wrapping_mul(1_099_511_628_211);
        v >>= 8;
    }
    h
}

/// The key of record `n`: "user" + its hash, zero-padded to [`KEY_BYTES`].
pub fn key(n: u64, out: &mut [u8; KEY_BYTES]) {
    out[..4].copy_from_slice(b"user");
    let mut h = fnv64(n);
    for i in (4..KEY_BYTES).rev() {
        out[i] = b'0' + (h % 10) as u8;
        h /= 10;
    }
}

/// YCSB's `ZipfianGenerator` (Gray et al., "Quickly generating billion-record synthetic
/// databases"): item 0 is the most popular. The item count may grow; zeta is then extended
/// incrementally, as YCSB does.
#[derive(Clone, Debug)]
pub struct Zipfian {
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
    n: u64,
}

fn zeta(from: u64, to: u64, theta: f64, init: f64) -> f64 {
    (from..to).fold(init, |s, i| s + 1.0 / ((i + 1) as f64).powf(theta))
}

impl Zipfian {
    /// Over `n` items, computing zeta(n) (O(n)).
    pub fn new(n: u64, theta: f64) -> Zipfian {
        Zipfian::with_zeta(n, theta, zeta(0, n, theta, 0.0))
    }

    /// Over `n` items with a precomputed zeta(n).
    pub fn with_zeta(n: u64, theta: f64, zetan: f64) -> Zipfian {
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut z = Zipfian { theta, alpha: 1.0 / (1.0 - theta), zeta2, zetan, eta: 0.0, n: n.max(1) };
        z.eta = z.eta_for(z.n);
        z
    }

    fn eta_for(&self, n: u64) -> f64 {
        (1.0 - (2.0 / n as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// An item in `0..n`, given a uniform `u` in [0, 1).
    pub fn sample(&mut self, u: f64, n: u64) -> u64 {
        if n > self.n {
            self.zetan = zeta(self.n, n, self.theta, self.zetan);
            self.n = n;
            self.eta = self.eta_for(n);
        }
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(n - 1);
        }
        let r = (n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(n - 1)
    }
}

/// Item count and zeta of YCSB's `ScrambledZipfianGenerator`: a Zipfian over 10^10 items
/// whose draws are hashed onto the key space, so popular keys are spread out.
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

/// Picks an existing record number.
#[derive(Clone, Debug)]
pub enum Chooser {
    /// Uniform.
    Uniform,
    /// Scrambled Zipfian over a fixed number of items (see [`Chooser::new`]).
    Scrambled(Zipfian, u64),
    /// Skewed towards the latest records.
    Latest(Zipfian),
    /// Zipfian over the records sorted by key: rank r is the record with the r-th smallest key.
    Ordered(Zipfian, std::sync::Arc<[u64]>),
}

impl Chooser {
    /// A chooser for `dist` over (initially) `n` records, of which a phase expects to add
    /// `new` more. The scrambled Zipfian hashes its draws onto `n + 2 * new` items fixed for
    /// the phase and draws again when an item does not exist yet, as YCSB's `CoreWorkload`
    /// does (`expectednewkeys`, with its fudge factor of 2): hashing onto the growing record
    /// count instead would send the popular draws to different records after every insert,
    /// flattening the skew of Run E to about uniform.
    pub fn new(dist: Dist, n: u64, new: u64) -> Chooser {
        match dist {
            Dist::Uniform => Chooser::Uniform,
            Dist::Zipfian => Chooser::Scrambled(
                Zipfian::with_zeta(SCRAMBLED_ITEMS, ZIPF_THETA, SCRAMBLED_ZETAN),
                n.max(1).saturating_add(new.saturating_mul(2)),
            ),
            Dist::Latest => Chooser::Latest(Zipfian::new(n, ZIPF_THETA)),
            Dist::Ordered => {
                let mut by_key: Vec<u64> = (0..n.max(1)).collect();
                by_key.sort_unstable_by_key(|&r| fnv64(r));
                Chooser::Ordered(Zipfian::new(n.max(1), ZIPF_THETA), by_key.into())
            }
        }
    }

    /// A record number in `0..n`.
    pub fn next(&mut self, rng: &mut impl Rng, n: u64) -> u64 {
        match self {
            Chooser::Uniform => rng.gen_range(0..n),
            Chooser::Scrambled(z, items) => {
                let mut k = 0;
                // Items at or past `n` are records the phase has yet to insert, a small share,
                // so one of the first few draws lands below `n`; the bound keeps a chooser
                // asked about far fewer records than it was built for from looping long.
                for _ in 0..64 {
                    k = fnv64(z.sample(rng.gen(), SCRAMBLED_ITEMS)) % *items;
                    if k < n {
                        return k;
                    }
                }
                k % n
            }
            Chooser::Latest(z) => n - 1 - z.sample(rng.gen(), n),
            Chooser::Ordered(z, by_key) => {
                let m = (by_key.len() as u64).min(n).max(1);
                by_key.get(z.sample(rng.gen(), m) as usize).copied().unwrap_or(0) % n.max(1)
            }
        }
    }
}

/// One operation. Sizes are categories (index into [`PAIR_BYTES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Point read.
    Read(u64),
    /// Overwrite an existing record with a newly drawn size.
    Update(u64, u8),
    /// Add a new record.
    Insert(u64, u8),
    /// Read `len` pairs from the record's key on.
    Scan(u64, usize),
    /// Read, then overwrite.
    ReadModifyWrite(u64, u8),
    /// Read a record that may have been written and check its value's size (Verify).
    Check(u64),
}

impl Op {
    /// The record the operation starts at.
    pub fn record(self) -> u64 {
        match self {
            Op::Read(n) | Op::Update(n, _) | Op::Insert(n, _) | Op::Scan(n, _) => n,
            Op::ReadModifyWrite(n, _) | Op::Check(n) => n,
        }
    }
}

/// The operation sequence of one client thread: a function of the seed, the phase, the
/// thread's index and the thread count only, so every engine gets the same one.
pub struct OpGen {
    rng: StdRng,
    workload: Workload,
    mix: Mix,
    chooser: Chooser,
    thread: u64,
    threads: u64,
    /// Records that existed when the phase began (record numbers `0..base`).
    base: u64,
    /// Inserts this thread made in the phase; the i-th gets record `base + i*threads + thread`.
    pub inserts: u64,
    /// Operations this thread issues.
    pub count: u64,
    done: u64,
    /// Size draws so far (the cyclic mixes' counter).
    writes: u64,
    /// Updates read the pair first.
    update_rmw: bool,
}

impl OpGen {
    /// The generator of `thread` (of `threads`) for a phase that starts with `base` records.
    /// `chooser` is cloned from one built per phase, since building `latest` costs O(records).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        seed: u64,
        phase: usize,
        workload: Workload,
        mix: &Mix,
        chooser: Chooser,
        thread: usize,
        threads: usize,
        base: u64,
        total_ops: u64,
    ) -> OpGen {
        let (t, ts) = (thread as u64, threads as u64);
        let count = total_ops / ts + u64::from(t < total_ops % ts);
        let s = seed ^ fnv64((phase as u64) << 32 | t);
        OpGen {
            rng: StdRng::seed_from_u64(s),
            workload,
            mix: mix.clone(),
            chooser,
            thread: t,
            threads: ts,
            base,
            inserts: 0,
            count,
            done: 0,
            writes: 0,
            update_rmw: false,
        }
    }

    /// Makes the updates of Run A and Run B read-modify-writes, as YCSB-CXX's do (it reads
    /// the record to change one of its ten fields).
    pub fn reading_updates(mut self, yes: bool) -> OpGen {
        self.update_rmw = yes;
        self
    }

    /// Records this thread may choose from: the phase's base plus the inserts made at the
    /// same pace by every thread (another thread's may lag and read as missing).
    fn known(&self) -> u64 {
        self.base + self.inserts * self.threads
    }

    fn insert(&mut self) -> Op {
        let n = if self.workload == Workload::LoadA {
            self.done * self.threads + self.thread
        } else {
            let n = self.base + self.inserts * self.threads + self.thread;
            self.inserts += 1;
            n
        };
        Op::Insert(n, self.draw())
    }

    fn draw(&mut self) -> u8 {
        self.mix.draw(&mut self.rng, &mut self.writes)
    }

    /// Uniform bytes for values, drawn once per thread. Large enough (8 MiB) that values near
    /// each other in a log or SST are almost never copies of the same pool bytes: anything
    /// that compresses (replication packs segment images) must gain from structure, not
    /// from repeated values.
    pub fn value_pool(&mut self) -> Vec<u8> {
        let mut pool = vec![0u8; VALUE_POOL];
        self.rng.fill(&mut pool[..]);
        pool
    }

    /// An offset into the value pool for a value of `len` bytes.
    pub fn value_offset(&mut self, len: usize) -> usize {
        self.rng.gen_range(0..=VALUE_POOL - len)
    }
}

const VALUE_POOL: usize = 8 << 20;

impl Iterator for OpGen {
    type Item = Op;
    fn next(&mut self) -> Option<Op> {
        if self.done == self.count {
            return None;
        }
        let pct = self.rng.gen_range(0..100u32);
        let op = match self.workload {
            Workload::LoadA => self.insert(),
            Workload::Verify => Op::Check(self.done * self.threads + self.thread),
            Workload::RunA | Workload::RunB | Workload::RunC | Workload::RunF | Workload::RunW => {
                let write_pct = match self.workload {
                    Workload::RunW => 100,
                    Workload::RunA | Workload::RunF => 50,
                    Workload::RunB => 5,
                    _ => 0,
                };
                let n = self.known();
                let k = self.chooser.next(&mut self.rng, n);
                if pct >= write_pct {
                    Op::Read(k)
                } else if self.workload == Workload::RunF || self.update_rmw {
                    Op::ReadModifyWrite(k, self.draw())
                } else {
                    Op::Update(k, self.draw())
                }
            }
            Workload::RunD | Workload::RunE => {
                if u64::from(pct) < self.workload.insert_percent() {
                    self.insert()
                } else {
                    let n = self.known();
                    let k = self.chooser.next(&mut self.rng, n);
                    if self.workload == Workload::RunD {
                        Op::Read(k)
                    } else {
                        Op::Scan(k, self.rng.gen_range(1..=MAX_SCAN))
                    }
                }
            }
        };
        self.done += 1;
        Some(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_hashed_fixed_width_and_deterministic() {
        let (mut a, mut b) = ([0u8; KEY_BYTES], [0u8; KEY_BYTES]);
        key(1, &mut a);
        key(1, &mut b);
        assert_eq!(a, b);
        assert!(a.starts_with(b"user") && a[4..].iter().all(u8::is_ascii_digit));
        key(2, &mut b);
        assert_ne!(a, b);
        // Hashing scatters consecutive record numbers: load order is not key order.
        let keys: Vec<[u8; KEY_BYTES]> = (0..100)
            .map(|n| {
                let mut k = [0; KEY_BYTES];
                key(n, &mut k);
                k
            })
            .collect();
        assert!(keys.windows(2).any(|w| w[0] > w[1]));
        // YCSB's first loaded key is the well-known "user6284781860667377211".
        assert_eq!(fnv64(0), 6_284_781_860_667_377_211);
        key(0, &mut a);
        assert_eq!(&a, b"user06284781860667377211");
    }

    #[test]
    fn fnv_keys_are_ycsb_cxx_keys() {
        let mut k = [0u8; KEY_BYTES];
        // YCSB-CXX's BuildKeyName(0): the unsigned FNV-64 of 0, in decimal, no prefix.
        let n = KeyScheme::Fnv.write(0, &mut k);
        assert_eq!(&k[..n], b"12161962213042174405".as_slice());
        assert_eq!(fnv64_unsigned(0), 12_161_962_213_042_174_405);
        // The sign bit set: Java's abs differs from the unsigned value.
        assert_ne!(fnv64(0), fnv64_unsigned(0));
        let lens: Vec<usize> = (0..10_000).map(|i| KeyScheme::Fnv.write(i, &mut k)).collect();
        let mean = lens.iter().sum::<usize>() as f64 / lens.len() as f64;
        assert!((19.2..19.6).contains(&mean), "{mean}");
        assert!(lens.iter().all(|&l| (1..=20).contains(&l)));
        assert_eq!(KeyScheme::Ycsb.write(0, &mut k), KEY_BYTES);
        assert_eq!(&k, b"user06284781860667377211");
        assert!(KeyScheme::parse("murmur").unwrap_err().contains("fnv"));
    }

    #[test]
    fn ycsb_cxx_mixes_cycle_per_thread() {
        let m = Mix::parse("ycsb-cxx-sd").unwrap();
        assert_eq!(m.percent, [60, 20, 20]);
        let mut rng = StdRng::seed_from_u64(1);
        let mut writes = 0;
        let sizes: Vec<usize> = (0..20).map(|_| m.value_bytes(m.draw(&mut rng, &mut writes))).collect();
        let ten = [5, 5, 5, 5, 5, 5, 100, 100, 2000, 2000];
        assert_eq!(sizes[..10], ten);
        assert_eq!(sizes[10..], ten);
        let md = Mix::parse("YCSB-CXX-MD").unwrap();
        assert_eq!((md.name.as_str(), md.percent), ("ycsb-cxx-md", [20, 60, 20]));
        let mut w = 6;
        assert_eq!(md.value_bytes(md.draw(&mut rng, &mut w)), 5);
        let ld = Mix::parse("ycsb-cxx-ld").unwrap();
        let mut w = 8;
        assert_eq!(ld.value_bytes(ld.draw(&mut rng, &mut w)), 100);
        assert_eq!(Mix::parse("SD").unwrap().value_bytes(2), PAIR_BYTES[2] - KEY_BYTES);
    }

    #[test]
    fn updates_can_read_first_and_verify_reads_every_record() {
        let m = Mix::parse("ycsb-cxx-sd").unwrap();
        let ops: Vec<Op> =
            OpGen::new(3, 1, Workload::RunA, &m, Chooser::Uniform, 0, 1, 100, 1000).reading_updates(true).collect();
        assert!(ops.iter().all(|o| matches!(o, Op::Read(_) | Op::ReadModifyWrite(..))));
        assert!(ops.iter().filter(|o| matches!(o, Op::ReadModifyWrite(..))).count() > 400);
        let mut all: Vec<u64> = (0..3)
            .flat_map(|t| OpGen::new(3, 2, Workload::Verify, &m, Chooser::Uniform, t, 3, 10, 10))
            .map(|op| match op {
                Op::Check(n) => n,
                _ => unreachable!(),
            })
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }

    #[test]
    fn the_write_only_mix_updates_existing_keys_only() {
        let m = Mix::parse("L").unwrap();
        let ops: Vec<Op> = OpGen::new(3, 1, Workload::RunW, &m, Chooser::Uniform, 0, 1, 100, 1000).collect();
        assert_eq!(ops.len(), 1000);
        assert!(ops.iter().all(|o| matches!(o, Op::Update(k, _) if *k < 100)), "{:?}", ops.first());
        assert_eq!(Workload::parse("RUN-W"), Ok(Workload::RunW));
        assert!(!Workload::RunW.inserts());
    }

    #[test]
    fn zipfian_is_skewed() {
        let mut rng = StdRng::seed_from_u64(7);
        let n = 10_000u64;
        let mut z = Zipfian::new(n, ZIPF_THETA);
        let mut hits = vec![0u32; n as usize];
        let draws = 200_000;
        for _ in 0..draws {
            hits[z.sample(rng.gen(), n) as usize] += 1;
        }
        // With theta 0.99 over 10^4 items, item 0 takes ~1/zeta(n) ~ 10% of draws and the
        // top 1% of items take more than half.
        let top: u32 = hits[..100].iter().sum();
        assert!(hits[0] as f64 / draws as f64 > 0.07, "{}", hits[0]);
        assert!(top as f64 / draws as f64 > 0.5, "{top}");
        assert!(hits[0] > hits[10] && hits[10] > hits[1000]);
    }

    #[test]
    fn ordered_zipfian_asks_most_for_the_smallest_keys() {
        let mut rng = StdRng::seed_from_u64(5);
        let n = 1000;
        let mut c = Chooser::new(Dist::Ordered, n, 0);
        let mut by_key: Vec<u64> = (0..n).collect();
        by_key.sort_unstable_by_key(|&r| fnv64(r));
        let mut hits = vec![0u32; n as usize];
        for _ in 0..100_000 {
            let r = c.next(&mut rng, n);
            hits[by_key.iter().position(|&x| x == r).unwrap()] += 1;
        }
        // The first tenth of the keys in order takes most requests.
        let head: u32 = hits[..100].iter().sum();
        assert!(head > 60_000, "{head}");
        assert!(hits[0] > hits[10] && hits[10] > hits[500]);
    }

    #[test]
    fn scrambled_zipfian_stays_in_range_and_is_skewed() {
        let mut rng = StdRng::seed_from_u64(3);
        let n = 1000;
        let mut c = Chooser::new(Dist::Zipfian, n, 0);
        let mut hits = vec![0u32; n as usize];
        for _ in 0..100_000 {
            hits[c.next(&mut rng, n) as usize] += 1;
        }
        hits.sort_unstable_by(|a, b| b.cmp(a));
        // Far from uniform (100 per item).
        assert!(hits[0] > 2000, "{}", hits[0]);
    }

    #[test]
    fn scrambled_zipfian_keeps_its_popular_records_while_records_are_added() {
        let mut rng = StdRng::seed_from_u64(4);
        let mut c = Chooser::new(Dist::Zipfian, 1000, 50);
        let top = |c: &mut Chooser, rng: &mut StdRng, n: u64| {
            let mut hits = vec![0u32; n as usize];
            for _ in 0..50_000 {
                let k = c.next(rng, n);
                assert!(k < n);
                hits[k as usize] += 1;
            }
            let best = (0..n as usize).max_by_key(|&i| hits[i]).unwrap_or(0);
            (best, hits[best])
        };
        let (first, _) = top(&mut c, &mut rng, 1000);
        // One insert or fifty later, the same record is the most popular, and as popular.
        for n in [1001, 1037, 1050] {
            let (best, hits) = top(&mut c, &mut rng, n);
            assert_eq!(best, first, "n = {n}");
            assert!(hits > 2000, "{hits}");
        }
    }

    #[test]
    fn latest_prefers_new_records_and_grows() {
        let mut rng = StdRng::seed_from_u64(5);
        let mut c = Chooser::new(Dist::Latest, 1000, 0);
        let newest = (0..10_000).filter(|_| c.next(&mut rng, 1000) >= 990).count();
        assert!(newest > 3000, "{newest}");
        for _ in 0..1000 {
            assert!(c.next(&mut rng, 2000) < 2000);
        }
    }

    #[test]
    fn mixes_keep_their_proportions() {
        let mut rng = StdRng::seed_from_u64(11);
        for (name, want) in [("SD", [60, 20, 20]), ("MD", [20, 60, 20]), ("custom:5,15,80", [5, 15, 80])] {
            let m = Mix::parse(name).unwrap();
            let (mut got, mut writes) = ([0u32; 3], 0);
            for _ in 0..100_000 {
                got[m.draw(&mut rng, &mut writes) as usize] += 1;
            }
            for i in 0..3 {
                let pct = got[i] as f64 / 1000.0;
                assert!((pct - want[i] as f64).abs() < 1.0, "{name}: {got:?}");
            }
        }
        assert_eq!(Mix::parse("L").unwrap().percent, [0, 0, 100]);
        assert!(Mix::parse("custom:50,50").is_err());
    }

    #[test]
    fn op_sequence_is_deterministic_and_split_across_threads() {
        let m = Mix::parse("SD").unwrap();
        let gen = |t| OpGen::new(9, 1, Workload::RunE, &m, Chooser::new(Dist::Zipfian, 100, 50), t, 3, 100, 1000);
        let a: Vec<Op> = gen(0).collect();
        assert_eq!(a, gen(0).collect::<Vec<_>>());
        assert_ne!(a, gen(1).collect::<Vec<_>>());
        assert_eq!((0..3).map(|t| gen(t).count()).sum::<usize>(), 1000);
        for op in &a {
            match *op {
                Op::Scan(k, len) => assert!(k < 100 + 1000 && (1..=MAX_SCAN).contains(&len)),
                Op::Insert(k, _) => assert!(k >= 100 && k % 3 == 100 % 3),
                _ => panic!("run-e issues scans and inserts only: {op:?}"),
            }
        }
        // Load A covers every record number exactly once across the threads.
        let mut all: Vec<u64> = (0..3)
            .flat_map(|t| OpGen::new(9, 0, Workload::LoadA, &m, Chooser::Uniform, t, 3, 0, 10))
            .map(|op| match op {
                Op::Insert(k, _) => k,
                _ => unreachable!(),
            })
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
    }
}
