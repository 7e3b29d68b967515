//! Which processing node owns each store: the fence that keeps two processing nodes from
//! writing one store. A processing node opening a store claims it at an epoch higher than any
//! a storage node has seen (`remote/open.rs`); from then on, every store request of a
//! connection that holds an older epoch is refused with `Fenced`, so a processing node that
//! was replaced, but still runs, can neither change nor read the store.
//!
//! The claim is kept in `<dir>/<store>/CLAIM`, written whole to `CLAIM.tmp` and renamed.
//! Version 1 (little-endian):
//!
//! ```text
//! 0   u32 magic "HSCL" (0x4c435348) | u16 version = 1 | u16 0 | u64 epoch
//! 16  u32 owner length n | owner (n bytes, UTF-8) | u32 crc32c(bytes 0 .. 20 + n)
//! ```
//!
//! A store never claimed (no file) takes requests from any authenticated connection.

use crate::wire::Code;
use halyard_codec::{Reader, Writer};
use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A refusal: the wire error code and what to say.
type Refusal = (Code, String);

const MAGIC: u32 = 0x4c43_5348;
const VERSION: u16 = 1;
/// The claim file's name in a store's directory (fragment files are named by hex digits).
pub const FILE: &str = "CLAIM";

/// A store's claim: the owner of the highest epoch so far (0: never claimed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Claim {
    /// Raised by each processing node that opens the store.
    pub epoch: u64,
    /// Who claimed it, as the processing node named itself.
    pub owner: String,
}

/// Every store's claim, loaded at first use. A store request holds its store's read lock
/// while it runs, and a claim the write lock, so no request admitted under an older epoch
/// is still running when a newer claim is answered.
pub struct Claims {
    dir: PathBuf,
    stores: Mutex<HashMap<String, Arc<RwLock<Claim>>>>,
}

/// A request admitted to its store: the claim cannot change until it is dropped.
pub type Admitted<'a> = RwLockReadGuard<'a, Claim>;

impl Claims {
    /// The claims of the stores under `dir`.
    pub fn new(dir: &Path) -> Claims {
        Claims { dir: dir.to_path_buf(), stores: Mutex::new(HashMap::new()) }
    }

    fn of(&self, store: &str) -> Arc<RwLock<Claim>> {
        let mut stores = self.stores.lock();
        stores.entry(store.to_string()).or_insert_with(|| Arc::new(RwLock::new(load(&self.path(store))))).clone()
    }

    fn path(&self, store: &str) -> PathBuf {
        self.dir.join(store).join(FILE)
    }

    /// Runs `f` if a connection holding `held` (its epoch for the store, 0 for none) may use
    /// the store: the store was never claimed, or `held` is its current epoch.
    pub fn admit<T>(&self, store: &str, held: u64, f: impl FnOnce() -> Result<T, Refusal>) -> Result<T, Refusal> {
        let lock = self.of(store);
        let c = lock.read();
        if c.epoch != 0 && c.epoch != held {
            return Err((
                Code::Fenced,
                format!(
                    "store {store} is owned by {} since epoch {}; this connection holds epoch {held}: \
                     this processing node was replaced and must stop",
                    c.owner, c.epoch
                ),
            ));
        }
        f()
    }

    /// Takes the store for `owner` at `epoch` if that is later than its claim (or is its
    /// claim); the claim after the request. Epoch 0 only asks.
    pub fn claim(&self, store: &str, epoch: u64, owner: &str) -> Result<Claim, Refusal> {
        let lock = self.of(store);
        let mut c = lock.write();
        if epoch > c.epoch {
            let next = Claim { epoch, owner: owner.to_string() };
            save(&self.dir.join(store), &next).map_err(|e| (Code::Io, format!("recording a claim: {e}")))?;
            *c = next;
        }
        Ok(c.clone())
    }
}

/// A claim file's bytes.
pub fn encode(c: &Claim) -> Vec<u8> {
    let mut w = Writer::new();
    w.u32(MAGIC).u16(VERSION).u16(0).u64(c.epoch).bytes(c.owner.as_bytes());
    let crc = crc32c::crc32c(w.as_slice());
    w.u32(crc);
    w.into_inner()
}

/// Parses a claim file; None when it fails its checks.
pub fn decode(b: &[u8]) -> Option<Claim> {
    let mut r = Reader::new(b);
    let (magic, version, _, epoch) = (r.u32().ok()?, r.u16().ok()?, r.u16().ok()?, r.u64().ok()?);
    let owner = r.bytes().ok()?;
    let body = b.get(..20 + owner.len())?;
    let crc = r.u32().ok()?;
    if magic != MAGIC || version != VERSION || crc32c::crc32c(body) != crc || r.finish().is_err() {
        return None;
    }
    Some(Claim { epoch, owner: String::from_utf8(owner.to_vec()).ok()? })
}

/// A store's claim from its file. A file that fails its checks counts as the highest epoch,
/// owned by nobody: every connection is fenced from the store until a person looks (the
/// node logs why), rather than letting an old owner write.
fn load(path: &Path) -> Claim {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Claim::default(),
        Ok(b) => decode(&b).unwrap_or_else(|| broken(path, "fails its checks")),
        Err(e) => broken(path, &e.to_string()),
    }
}

fn broken(path: &Path, why: &str) -> Claim {
    tracing::error!("{}: {why}; the store refuses every connection until the file is mended", path.display());
    let owner = format!(
        "nobody: {} {why}; delete it once one processing node alone uses the store, and restart this storage node",
        path.display()
    );
    Claim { epoch: u64::MAX, owner }
}

fn save(store_dir: &Path, c: &Claim) -> std::io::Result<()> {
    std::fs::create_dir_all(store_dir)?;
    let tmp = store_dir.join(format!("{FILE}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&encode(c))?;
    f.sync_all()?;
    std::fs::rename(&tmp, store_dir.join(FILE))?;
    File::open(store_dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_claim_fences_the_earlier_owner_and_survives_a_restart() {
        let d = tempfile::tempdir().unwrap();
        let c = Claims::new(d.path());
        assert!(c.admit("s", 0, || Ok(())).is_ok(), "a store never claimed takes anyone");
        assert_eq!(c.claim("s", 3, "a").unwrap(), Claim { epoch: 3, owner: "a".into() });
        assert!(c.admit("s", 3, || Ok(())).is_ok());
        assert_eq!(c.admit("s", 0, || Ok(())).unwrap_err().0, Code::Fenced);
        // The same epoch again is not taken from its owner; a lower one neither.
        assert_eq!(c.claim("s", 3, "b").unwrap().owner, "a");
        assert_eq!(c.claim("s", 2, "b").unwrap().owner, "a");
        assert_eq!(c.claim("s", 0, "b").unwrap().epoch, 3, "epoch 0 asks");
        assert_eq!(c.claim("s", 4, "b").unwrap().owner, "b");
        assert_eq!(c.admit("s", 3, || Ok(())).unwrap_err().0, Code::Fenced);
        let again = Claims::new(d.path());
        assert_eq!(again.claim("s", 0, "x").unwrap(), Claim { epoch: 4, owner: "b".into() });
        assert!(again.admit("other", 0, || Ok(())).is_ok(), "claims are per store");
    }

    #[test]
    fn a_damaged_claim_file_fences_everyone() {
        let d = tempfile::tempdir().unwrap();
        Claims::new(d.path()).claim("s", 5, "a").unwrap();
        let path = d.path().join("s").join(FILE);
        let mut b = std::fs::read(&path).unwrap();
        b[9] ^= 1;
        std::fs::write(&path, b).unwrap();
        let c = Claims::new(d.path());
        assert_eq!(c.admit("s", 5, || Ok(())).unwrap_err().0, Code::Fenced);
    }
}
