//! Errors of admin requests and of the frames they travel in.

/// What went wrong. The texts are replication's (`halyard_replication::Error`), which takes
/// these over variant by variant.
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
    /// The node refused.
    #[error("rejected by the peer: {0}")]
    Rejected(String),
    /// The node answered something unexpected.
    #[error("unexpected reply: {0}")]
    Protocol(String),
}

/// Result of admin requests.
pub type Result<T> = std::result::Result<T, Error>;

/// A body that ends before its last field.
impl From<halyard_codec::Short> for Error {
    fn from(_: halyard_codec::Short) -> Error {
        Error::Malformed("message shorter than its fields")
    }
}
