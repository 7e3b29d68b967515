//! The epochs file (`docs/replication.md` §4): the highest epoch this node has seen for each
//! region it backs up, kept across restarts, so that a primary fenced off by a promotion stays
//! fenced off. One line per region, `<region id> <epoch>\n`; rewritten whole through a
//! temporary, fsynced, renamed, and the directory fsynced.

use crate::Result;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::path::PathBuf;

/// The file, and the turn its writers take.
pub(super) struct EpochsFile {
    path: PathBuf,
    turn: Mutex<()>,
}

impl EpochsFile {
    pub(super) fn new(path: PathBuf) -> EpochsFile {
        EpochsFile { path, turn: Mutex::new(()) }
    }

    /// The stored epochs by region; lines that do not parse, and a missing or unreadable
    /// file, count as none.
    pub(super) fn load(&self) -> HashMap<u32, u64> {
        let text = std::fs::read_to_string(&self.path).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let (r, e) = l.split_once(' ')?;
                Some((r.parse().ok()?, e.parse().ok()?))
            })
            .collect()
    }

    /// Stores `epoch` as `region`'s, durably.
    pub(super) fn store(&self, region: u32, epoch: u64) -> Result<()> {
        // Streams of several regions open at once: each rewrites the whole file through one
        // temporary, so they take turns (or one's rename fails and another's epoch is lost).
        let _turn = self.turn.lock();
        let mut all = self.load();
        all.insert(region, epoch);
        let text: String = all.iter().map(|(r, e)| format!("{r} {e}\n")).collect();
        let tmp = self.path.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            // An epoch a backup has promised to enforce must survive a crash.
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }
}
