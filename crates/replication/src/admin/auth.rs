//! Authentication of a connection to the replication port (`crates/admin/docs/admin.md`
//! §2.2): its first frame must be an `Auth` carrying the cluster secret when this process has
//! one (`halyard_admin::auth`); then comes the message that opens it, a primary's Hello or an
//! admin request.

use crate::replica::Replica;
use crate::wire::Msg;
use crate::Result;
use halyard_admin::{auth, frame, Msg as AdminMsg};
use std::sync::atomic::Ordering::Relaxed;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The message that opens a connection: a replication stream's or an admin message (told
/// apart by its tag).
pub(super) enum Opening {
    /// A primary's stream (its Hello) or any other stream message.
    Stream(Msg),
    /// An admin request, or any other admin message.
    Admin(AdminMsg),
}

/// Reads one frame and decodes it as whichever message its tag names.
async fn read_opening(s: &mut TcpStream) -> Result<Opening> {
    let body = frame::read_body(s).await?;
    match body.first() {
        Some(t) if halyard_admin::is_admin_tag(*t) => Ok(Opening::Admin(AdminMsg::decode_body(&body)?)),
        _ => Ok(Opening::Stream(Msg::decode_body(&body)?)),
    }
}

impl Replica {
    /// The connection's first message after its `Auth` frame, which must carry the cluster
    /// secret when this process has one; None (after a Reject saying why) if it does not.
    pub(super) async fn authenticate(&self, s: &mut TcpStream) -> Result<Option<Opening>> {
        let (ok, next) = match read_opening(s).await? {
            Opening::Admin(AdminMsg::Auth { secret }) => (auth::matches(&secret), None),
            m => (auth::secret().is_none(), Some(m)),
        };
        if !ok {
            self.stats.unauthenticated.fetch_add(1, Relaxed);
            let reason = "this node requires the cluster secret: give every node and every `halyard admin` or \
                          `halyard cluster` command the same --cluster-secret"
                .to_string();
            tracing::warn!(peer = ?s.peer_addr().ok(), "replication connection refused: missing or wrong cluster secret");
            s.write_all(&AdminMsg::Reject { region: 0, reason }.encode()).await?;
            return Ok(None);
        }
        match next {
            Some(m) => Ok(Some(m)),
            None => Ok(Some(read_opening(s).await?)),
        }
    }
}
