//! The node side of the replication port (`crates/admin/docs/admin.md` §3): every connection
//! is authenticated (`auth.rs`), then its first message opens either a primary's replication
//! stream (served by `crate::replica`) or one admin request, answered here — Promote, Dump,
//! Host, AddBackup — with the node's role changes left to its [`NodeHooks`] (`hooks.rs`).
//!
//! The requests' messages and the client that sends them are the `halyard-admin` crate; its
//! client calls are re-exported here ([`promote`], [`host`], [`add_backup`], [`dump`]).

mod auth;
mod hooks;

pub use halyard_admin::{add_backup, dump, host, promote, split};
pub use hooks::{Hooks, NodeHooks};

use crate::replica::Replica;
use crate::wire::Msg;
use crate::{Error, Result};
use auth::Opening;
use halyard_admin::Msg as AdminMsg;
use std::sync::Arc;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

impl Replica {
    /// Handles one inbound connection: a primary's stream, or an admin request.
    pub async fn serve_connection(self: Arc<Self>, mut s: TcpStream, hooks: Hooks) -> Result<()> {
        s.set_nodelay(true)?;
        let Some(first) = self.authenticate(&mut s).await? else { return Ok(()) };
        match first {
            Opening::Stream(m @ Msg::Hello { .. }) => self.streams(s, m).await,
            Opening::Admin(request) => self.answer(&mut s, request, &hooks).await,
            Opening::Stream(m) => Err(Error::Protocol(format!("{m:?} cannot open a connection"))),
        }
    }

    /// Answers one admin request on `s`; the connection closes after the reply.
    async fn answer(self: &Arc<Self>, s: &mut TcpStream, request: AdminMsg, hooks: &Hooks) -> Result<()> {
        match request {
            AdminMsg::Promote { epoch, region } => {
                let reply = match self.promote(region, epoch, hooks).await {
                    Ok((last_lsn, dropped)) => AdminMsg::Promoted { region, last_lsn, dropped },
                    Err(e) => AdminMsg::Reject { region, reason: e.to_string() },
                };
                s.write_all(&reply.encode()).await?;
                Ok(())
            }
            AdminMsg::Dump { region, after, limit } => {
                // The region's streams stay paused until the page is sent.
                let at_rest = self.dump_at_rest(region, after, limit).await?;
                let reply = match &at_rest.page {
                    Ok(page) => page.encode(),
                    Err(e) => AdminMsg::Reject { region, reason: e.to_string() }.encode(),
                };
                s.write_all(&reply).await?;
                Ok(())
            }
            AdminMsg::Host { epoch, region, start, end } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.host(region, epoch, &start, end.as_deref())).await;
                reply_done(s, region, r).await
            }
            AdminMsg::AddBackup { epoch, region, node, native, replication } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.add_backup(region, epoch, &node, &native, &replication))
                    .await;
                reply_done(s, region, r).await
            }
            AdminMsg::Handoff { epoch, region } => {
                let h = hooks.clone();
                reply_fenced(s, region, tokio::task::spawn_blocking(move || h.handoff(region, epoch)).await).await
            }
            AdminMsg::Split { epoch, region, at, child } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.split(region, epoch, &at, child)).await;
                reply_fenced(s, region, r).await
            }
            AdminMsg::Merge { epoch, region, right_epoch, right, merged_epoch } => {
                let h = hooks.clone();
                let r = tokio::task::spawn_blocking(move || h.merge(region, epoch, (right, right_epoch), merged_epoch))
                    .await;
                reply_fenced(s, region, r).await
            }
            m => Err(Error::Protocol(format!("{m:?} cannot open a connection"))),
        }
    }

    /// A Promote: fences the old primary off, then has the node take the region over. A node
    /// that is not a backup of the region answers with what it leads, if it already does
    /// (the request asked again, its answer lost, or by a new master while the old one's is
    /// still under way: `leads` waits for that one to end).
    async fn promote(&self, region: u32, epoch: u64, hook: &Hooks) -> Result<(u64, u64)> {
        let fenced = self.fence_for_promotion(region, epoch).await;
        if !matches!(fenced, Ok(true)) {
            // No backup copy here, or one fenced at this epoch already.
            let h = hook.clone();
            let led = tokio::task::spawn_blocking(move || h.leads(region, epoch))
                .await
                .map_err(|e| Error::Protocol(e.to_string()))?;
            return match (led, fenced) {
                (Some(lsn), _) => Ok((lsn, 0)),
                (None, Err(e)) => Err(e),
                (None, Ok(_)) => Err(Error::Rejected(format!("not a backup of region {region}"))),
            };
        }
        let hook = hook.clone();
        tokio::task::spawn_blocking(move || hook.promote(region, epoch))
            .await
            .map_err(|e| Error::Protocol(e.to_string()))?
    }
}

/// The reply to Handoff, Split or Merge: HandedOff with the last LSN, or a Reject saying why not.
async fn reply_fenced(
    s: &mut TcpStream,
    region: u32,
    r: std::result::Result<Result<u64>, tokio::task::JoinError>,
) -> Result<()> {
    let reply = match r {
        Ok(Ok(last_lsn)) => AdminMsg::HandedOff { region, last_lsn },
        Ok(Err(e)) => AdminMsg::Reject { region, reason: e.to_string() },
        Err(e) => AdminMsg::Reject { region, reason: e.to_string() },
    };
    s.write_all(&reply.encode()).await?;
    Ok(())
}

/// The reply to Host or AddBackup: Done, or a Reject saying why not.
async fn reply_done(
    s: &mut TcpStream,
    region: u32,
    r: std::result::Result<Result<()>, tokio::task::JoinError>,
) -> Result<()> {
    let reply = match r {
        Ok(Ok(())) => AdminMsg::Done { region },
        Ok(Err(e)) => AdminMsg::Reject { region, reason: e.to_string() },
        Err(e) => AdminMsg::Reject { region, reason: e.to_string() },
    };
    s.write_all(&reply.encode()).await?;
    Ok(())
}
