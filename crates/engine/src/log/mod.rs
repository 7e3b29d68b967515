//! The logs of a region: the in-memory tail of each log, the writer that takes its chunks to the
//! device, and the hooks that hand appends to replication.

pub(crate) mod listener;
pub(crate) mod tail;
pub(crate) mod writer;
