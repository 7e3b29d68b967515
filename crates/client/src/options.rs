//! Connection settings of the client.

use std::time::Duration;

use halyard_proto::DEFAULT_MAX_FRAME_BYTES;

/// Connection settings.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Limit for connecting (with the handshake) and for each request's reply.
    pub timeout: Duration,
    /// Largest reply frame this client accepts; the server fits scan pages within it and refuses
    /// a GET whose value would not fit (`ErrorCode::ResponseTooLarge`).
    pub max_frame_bytes: usize,
    /// Pairs per page requested by [`Client::scan_all`].
    pub scan_page_pairs: u32,
    /// How long a [`crate::ClusterClient`] keeps retrying a request whose region is changing
    /// hands (`NotLeader`, a primary that died) before it returns the last error.
    pub retry_for: Duration,
    /// The server's password (`requirepass`), sent with AUTH on every connection.
    pub password: Option<String>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(10),
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            scan_page_pairs: 1000,
            retry_for: Duration::from_secs(10),
            password: None,
        }
    }
}
