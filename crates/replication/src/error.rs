//! Errors of replication.

/// What went wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frame or message could not be parsed.
    #[error("malformed replication message: {0}")]
    Malformed(&'static str),
    /// A frame's checksum does not match.
    #[error("replication frame checksum mismatch")]
    Checksum,
    /// The network failed.
    #[error("replication connection: {0}")]
    Io(#[from] std::io::Error),
    /// The storage engine failed.
    #[error("storage engine: {0}")]
    Engine(#[from] halyard_engine::Error),
    /// The peer refused.
    #[error("rejected by the peer: {0}")]
    Rejected(String),
    /// The peer answered something unexpected.
    #[error("unexpected reply: {0}")]
    Protocol(String),
}

/// Result of replication operations.
pub type Result<T> = std::result::Result<T, Error>;
