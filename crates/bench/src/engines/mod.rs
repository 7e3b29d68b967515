//! The engines under test behind one trait, opened from one common configuration so that
//! every engine gets the same budgets.

mod api;
mod cluster;
mod halyard;
mod native;
mod resp;
#[cfg(feature = "rocksdb")]
mod rocks;
mod server;

use crate::args::{EngineKind, Proto};
use std::path::Path;

pub use api::{disk_bytes, set_bench_thread, Engine, EngineConfig, EngineStats, ServerSample};
pub(crate) use halyard::STALL_BUCKETS;

/// Opens `kind` in `dir` (which must not hold a store; a `redis-server` child keeps its
/// data there, remote targets do not use it).
pub fn open(kind: &EngineKind, dir: &Path, cfg: &EngineConfig) -> Result<Box<dyn Engine>, String> {
    match kind {
        EngineKind::Redis => Ok(Box::new(resp::Resp::spawn_redis(dir, cfg)?)),
        EngineKind::Remote(t) if t.proto == Proto::Resp => Ok(Box::new(resp::Resp::connect(t, cfg)?)),
        EngineKind::Remote(t) => Ok(Box::new(native::Native::connect(t, cfg)?)),
        EngineKind::Cluster(mode) => {
            let spec = cfg.cluster.clone().ok_or("cluster engine without --cluster")?;
            Ok(Box::new(cluster::Cluster::spawn(dir, cfg, &spec, *mode)?))
        }
        EngineKind::Halyard => Ok(Box::new(halyard::Halyard::open(dir, cfg, None)?)),
        // Fails after enough writes to be inside the load phase of the smallest test run.
        EngineKind::Faulty => Ok(Box::new(halyard::Halyard::open(dir, cfg, Some(1000))?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Rocksdb => Ok(Box::new(rocks::Rocks::open(dir, cfg, false)?)),
        #[cfg(feature = "rocksdb")]
        EngineKind::Blobdb => Ok(Box::new(rocks::Rocks::open(dir, cfg, true)?)),
        #[cfg(not(feature = "rocksdb"))]
        EngineKind::Rocksdb | EngineKind::Blobdb => {
            Err(format!("engine {} needs a build with the `rocksdb` feature", kind.name()))
        }
    }
}
