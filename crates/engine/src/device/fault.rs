//! A storage that fails on a plan: the Nth read, write or sync returns an error, or the
//! storage dies at its Nth write or sync, tearing that write at a byte offset. Over
//! [`MemStorage`](super::mem::MemStorage), a death followed by `power_loss` is a machine
//! losing power; a death alone is the process killed. The plan comes from a seed, so a seed
//! replays a failure.

use super::storage::Storage;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// When a [`FaultStorage`] fails. Operations count from 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// The Nth read returns an error.
    pub fail_read: Option<u64>,
    /// The Nth write returns an error (writing nothing).
    pub fail_write: Option<u64>,
    /// The Nth sync returns an error (making nothing durable).
    pub fail_sync: Option<u64>,
    /// The storage dies at its Nth write or sync (counted together): that operation and
    /// every later one fail.
    pub die_at: Option<u64>,
    /// A write the storage dies in stores its first `tear` bytes (none when `None`).
    pub tear: Option<usize>,
}

impl FaultPlan {
    /// A death at one of the first `ops` writes and syncs, chosen by `seed`, tearing a write it
    /// dies in at a 512-byte boundary half the time.
    pub fn death(seed: u64, ops: u64) -> FaultPlan {
        let mut r = seed;
        let die = splitmix(&mut r) % ops.max(1) + 1;
        let tear = splitmix(&mut r).is_multiple_of(2).then(|| (splitmix(&mut r) % 16) as usize * 512);
        FaultPlan { die_at: Some(die), tear, ..FaultPlan::default() }
    }
}

fn splitmix(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A [`Storage`] that passes operations to another until its [`FaultPlan`] says otherwise.
pub struct FaultStorage {
    inner: Arc<dyn Storage>,
    plan: FaultPlan,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    dead: AtomicBool,
}

fn injected(what: &str) -> io::Error {
    io::Error::other(format!("injected fault: {what}"))
}

impl FaultStorage {
    /// `inner`, failing as `plan` says.
    pub fn new(inner: Arc<dyn Storage>, plan: FaultPlan) -> FaultStorage {
        FaultStorage {
            inner,
            plan,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            dead: AtomicBool::new(false),
        }
    }

    /// Whether the storage has died.
    pub fn is_dead(&self) -> bool {
        self.dead.load(Relaxed)
    }

    /// Writes and syncs so far (what `die_at` counts).
    pub fn writes_and_syncs(&self) -> u64 {
        self.writes.load(Relaxed) + self.syncs.load(Relaxed)
    }

    /// Counts a write or sync; true when the storage dies at it.
    fn dies_now(&self) -> bool {
        let n = self.writes_and_syncs();
        if self.plan.die_at.is_some_and(|d| n >= d) {
            self.dead.store(true, Relaxed);
        }
        self.is_dead()
    }
}

impl Storage for FaultStorage {
    fn seg_bits(&self) -> u32 {
        self.inner.seg_bits()
    }

    fn read(&self, seg: u32, off: u64, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.reads.fetch_add(1, Relaxed) + 1;
        if self.is_dead() || self.plan.fail_read == Some(n) {
            return Err(injected("read"));
        }
        self.inner.read(seg, off, buf)
    }

    fn write(&self, seg: u32, off: u64, buf: &[u8]) -> io::Result<()> {
        let was_dead = self.is_dead();
        let n = self.writes.fetch_add(1, Relaxed) + 1;
        if was_dead {
            return Err(injected("write after death"));
        }
        if self.dies_now() {
            if let Some(t) = self.plan.tear.filter(|&t| t > 0) {
                let _ = self.inner.write(seg, off, buf.get(..t).unwrap_or(buf));
            }
            return Err(injected("death during a write"));
        }
        if self.plan.fail_write == Some(n) {
            return Err(injected("write"));
        }
        self.inner.write(seg, off, buf)
    }

    fn sync(&self) -> io::Result<()> {
        let was_dead = self.is_dead();
        let n = self.syncs.fetch_add(1, Relaxed) + 1;
        if was_dead || self.dies_now() {
            return Err(injected("sync after death"));
        }
        if self.plan.fail_sync == Some(n) {
            return Err(injected("sync"));
        }
        self.inner.sync()
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        if self.is_dead() {
            return Err(injected("resize after death"));
        }
        self.inner.set_len(len)
    }

    fn punch(&self, seg: u32, off: u64, len: u64) -> bool {
        !self.is_dead() && self.inner.punch(seg, off, len)
    }

    fn allocate(&self, seg: u32, off: u64, len: u64) -> bool {
        !self.is_dead() && self.inner.allocate(seg, off, len)
    }
}
