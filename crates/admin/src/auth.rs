//! The cluster secret: one shared secret authenticates every connection to a node's
//! replication port (a primary's streams, the master's and `halyard admin`'s requests). A
//! process holds one node, so the secret is process-wide: set it once at start
//! ([`set_cluster_secret`]); every connection this process opens then begins with an `Auth`
//! frame carrying it ([`hello_frame`]), and every connection it accepts must begin with one
//! that matches ([`matches()`]). Without TLS the secret crosses the network as it is (as Redis'
//! AUTH does): it keeps out whoever can reach the port without knowing it, not whoever can
//! read the traffic.

use parking_lot::RwLock;

static SECRET: RwLock<Option<Vec<u8>>> = RwLock::new(None);

/// Sets (or, with None, clears) the secret this process sends and requires.
pub fn set_cluster_secret(secret: Option<&str>) {
    *SECRET.write() = secret.filter(|s| !s.is_empty()).map(|s| s.as_bytes().to_vec());
}

/// The secret, if one is set.
pub fn secret() -> Option<Vec<u8>> {
    SECRET.read().clone()
}

/// Whether `given` is the secret (in time that does not depend on where they differ); true
/// when no secret is set.
pub fn matches(given: &[u8]) -> bool {
    match SECRET.read().as_deref() {
        None => true,
        Some(want) => bool::from(subtle::ConstantTimeEq::ct_eq(want, given)),
    }
}

/// The frame a new connection starts with, if a secret is set.
pub fn hello_frame() -> Option<Vec<u8>> {
    secret().map(|secret| crate::Msg::Auth { secret }.encode())
}
