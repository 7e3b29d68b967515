//! The control plane's one error type.

/// Why a control-plane operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// etcd could not be reached or refused the request.
    #[error("etcd: {0}; is etcd running at the address given with --etcd?")]
    Etcd(#[from] crate::etcd::Error),
    /// A value under the cluster's prefix is not what this release writes.
    #[error("cluster metadata key {key}: {message}")]
    Corrupt {
        /// The key.
        key: String,
        /// What is wrong with its value.
        message: String,
    },
    /// The request does not fit the cluster as it is.
    #[error("{0}")]
    Invalid(String),
    /// A node refused or failed an admin request.
    #[error("{0}")]
    Admin(#[from] halyard_admin::Error),
}

/// Result of the control plane.
pub type Result<T> = std::result::Result<T, Error>;
