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

/// Frames and admin messages fail as `halyard-admin`'s errors; each keeps its meaning here.
impl From<halyard_admin::Error> for Error {
    fn from(e: halyard_admin::Error) -> Error {
        match e {
            halyard_admin::Error::Malformed(m) => Error::Malformed(m),
            halyard_admin::Error::Checksum => Error::Checksum,
            halyard_admin::Error::Io(e) => Error::Io(e),
            halyard_admin::Error::Rejected(r) => Error::Rejected(r),
            halyard_admin::Error::Protocol(p) => Error::Protocol(p),
            e => Error::Protocol(e.to_string()),
        }
    }
}
