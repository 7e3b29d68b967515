//! Segments kept on storage nodes (Nova-LSM's StoCs, `docs/segstore.md`).
//!
//! A processing node's engine reads and writes whole segments through
//! [`halyard_engine::Storage`]; [`RemoteStorage`] is one whose segments live on storage nodes:
//! each segment is striped in 4 KiB blocks over ρ data fragments plus one parity fragment,
//! written to ρ + 1 storage nodes picked by power-of-d. A storage node ([`node`]) keeps
//! fragments in local files with a checksum per block and serves them over TCP ([`wire`]),
//! behind the cluster secret. Reads rebuild a fragment that is missing, unreachable or corrupt
//! from the others; a write or sync that a node fails moves that node's fragments to another.
//!
//! The modules depend in one direction: `stripe` and `wire` on nothing here, `node` on both,
//! `remote` on both (never on `node`).

pub mod node;
pub mod remote;
pub mod stripe;
pub mod wire;

pub use remote::{RemoteOptions, RemoteStorage};
