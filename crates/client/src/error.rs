//! The client's error type.

use halyard_proto::ErrorCode;

/// Everything a call can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Connecting or talking to the server failed at the socket level.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// No reply within `ClientOptions::timeout` (the request may still have been applied).
    #[error("request timed out")]
    Timeout,
    /// The server sent something that is not valid protocol (or the handshake failed).
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server executed or refused the request and answered with an error.
    #[error("server error {code}: {message}")]
    Server {
        /// What went wrong; act on this.
        code: ErrorCode,
        /// Detail for humans.
        message: String,
    },
    /// The connection closed before the reply came (the request may or may not have been applied).
    #[error("connection closed")]
    Closed,
    /// A batch's keys lie in more than one region of a cluster: a batch is atomic only within
    /// one region. Split it by region.
    #[error("the batch's keys span regions {0} and {1}; a batch must stay in one region")]
    CrossRegion(u32, u32),
    /// The request would exceed the largest frame the server accepts (announced in the handshake).
    #[error("request frame of {size} bytes exceeds the server's limit of {max} bytes")]
    RequestTooLarge {
        /// Size of the frame the request would need.
        size: u64,
        /// The server's limit.
        max: usize,
    },
}

impl Error {
    /// The server's error code, for [`Error::Server`].
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Server { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the request may have taken effect although it failed: no reply came (`Closed`,
    /// `Timeout`, `Io`), or the node ran it without its backups confirming (`OutcomeUnknown`).
    /// Read a write back before resending it, unless it is safe to run twice.
    pub fn outcome_unknown(&self) -> bool {
        match self {
            Error::Server { code, .. } => *code == ErrorCode::OutcomeUnknown,
            Error::Io(_) | Error::Timeout | Error::Closed => true,
            _ => false,
        }
    }

    /// A copy for each request a connection failure fails. I/O errors are not `Clone`, so they
    /// become `Closed`, which is what callers act on anyway.
    pub(crate) fn replicate(&self) -> Error {
        match self {
            Error::Protocol(m) => Error::Protocol(m.clone()),
            Error::Server { code, message } => Error::Server { code: *code, message: message.clone() },
            Error::Timeout => Error::Timeout,
            Error::CrossRegion(a, b) => Error::CrossRegion(*a, *b),
            _ => Error::Closed,
        }
    }
}
