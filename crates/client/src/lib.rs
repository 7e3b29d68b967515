//! Rust client for Halyard's native protocol.
//!
//! One [`Client`] is one TCP connection, shared by all its clones: every request gets an id, a
//! writer task sends whatever requests are queued in one write, and a reader task hands each reply
//! to the request with its id, in whatever order replies arrive. Concurrent calls from clones
//! therefore pipeline on the one connection. If the connection is lost (the server restarted or
//! closed it for idling), requests in flight fail with [`Error::Closed`] and the next call
//! reconnects.
//!
//! ```no_run
//! # async fn demo() -> Result<(), halyard_client::Error> {
//! use halyard_client::{Batch, Client, ClientOptions};
//! let client = Client::connect("127.0.0.1:7400", ClientOptions::default()).await?;
//! client.put(b"k", b"v").await?;
//! assert_eq!(client.get(b"k").await?, Some(b"v".to_vec()));
//! client.write_batch(Batch::new().put("a", "1").delete("k")).await?;
//! let all = client.scan_all(std::ops::Bound::Unbounded, std::ops::Bound::Unbounded, false).await?;
//! # Ok(()) }
//! ```
//!
//! [`ClusterClient`] talks to a whole cluster: it reads the region map from any node, sends each
//! request to its region's primary and follows the region when it changes hands.
//! [`blocking::Client`] and [`blocking::ClusterClient`] offer the same calls to synchronous code.

#![warn(unreachable_pub)]

pub mod blocking;
mod client;
mod cluster;
mod conn;
mod error;
mod options;

pub use client::{Batch, Client};
pub use cluster::ClusterClient;
pub use error::Error;
pub use halyard_proto::{ErrorCode, ScanPage};
pub use options::ClientOptions;

/// Result with the client's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;
