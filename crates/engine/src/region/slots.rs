//! The state other subsystems keep in each region object, one slot per subsystem. `region/`
//! creates the slots with the region and never looks inside them; each slot's fields are read
//! and written by its subsystem alone (named on each type), through the region's accessor for
//! it. The slots are defined here because `region/` may not import the subsystems above it,
//! and kept in the region object (not in a map by region id) so that the state lives and dies
//! with the object: a region rebuilt by a promotion or demotion starts with fresh slots, while
//! the replaced object keeps its levels claimed for good.

use parking_lot::Mutex;
use std::collections::HashMap;

/// Compaction's state (`placement/compaction.rs`).
pub(crate) struct CompactionState {
    /// Levels (0 = L0) taking part in a running compaction.
    pub(crate) busy: Mutex<Vec<bool>>,
    /// Per level: the last key compacted, for round-robin SST choice.
    pub(crate) cursor: Mutex<Vec<Vec<u8>>>,
    /// Every level is wanted at once (`compaction::claim_all_levels`): no job starts, so that
    /// the running ones end and the claim does not wait for ever behind new ones.
    pub(crate) claiming: std::sync::atomic::AtomicBool,
}

impl CompactionState {
    /// No level busy, every cursor at the start, for `levels` levels (0 = L0).
    pub(crate) fn new(levels: usize) -> CompactionState {
        CompactionState {
            busy: Mutex::new(vec![false; levels]),
            cursor: Mutex::new(vec![Vec::new(); levels]),
            claiming: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

/// GC's state (`placement/gc.rs`).
#[derive(Default)]
pub(crate) struct GcState {
    /// Held by a GC pass; taken to keep GC out (a snapshot for a new backup, a demotion).
    pub(crate) lock: Mutex<()>,
}

/// A backup region's state (`replication/backup.rs`).
#[derive(Default)]
pub(crate) struct BackupState {
    /// Segments received that no committed edit names yet.
    pub(crate) reserved: Mutex<Reserved>,
}

/// Segments a backup reserved or wrote that no committed edit names yet. Lost (and the
/// segments freed) if the process stops: the primary ships them again when the backup
/// catches up.
#[derive(Default)]
pub(crate) struct Reserved {
    /// (primary log segment, salt) -> local segment.
    pub(crate) log: HashMap<(u32, u32), u32>,
    /// Primary SST segment -> local segment holding the rewritten SST.
    pub(crate) index: HashMap<u32, u32>,
    /// Primary SST segment -> digest of its description (`SstInfo::digest`), so that an
    /// interrupted copy's next try leaves out the SSTs that arrived whole.
    pub(crate) index_digest: HashMap<u32, u64>,
}

impl Reserved {
    /// Takes over `other`'s reservations (a region object replacing it, or joining it).
    pub(crate) fn take_from(&mut self, other: &mut Reserved) {
        self.log.extend(other.log.drain());
        self.index.extend(other.index.drain());
        self.index_digest.extend(other.index_digest.drain());
    }

    /// Whether no shipped segment waits for the edit that installs it.
    pub(crate) fn is_empty(&self) -> bool {
        self.log.is_empty() && self.index.is_empty()
    }
}
