//! The client side of admin requests: each call connects to a node's replication address,
//! sends the cluster secret (if this process has one) and one request, and reads one reply
//! (`docs/admin.md` §3).

use crate::msg::{read_msg, DumpPair, Msg};
use crate::{Error, Result};
use tokio::io::AsyncWriteExt;

async fn request(addr: &str, m: Msg) -> Result<Msg> {
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    let mut out = crate::auth::hello_frame().unwrap_or_default();
    out.extend_from_slice(&m.encode());
    s.write_all(&out).await?;
    read_msg(&mut s).await
}

/// Asks the node at `addr` to become the primary of `region` at `epoch`; returns the last
/// LSN of its rebuilt L0 and the records it could not replay.
pub async fn promote(addr: &str, region: u32, epoch: u64) -> Result<(u64, u64)> {
    match request(addr, Msg::Promote { epoch, region }).await? {
        Msg::Promoted { last_lsn, dropped, .. } => Ok((last_lsn, dropped)),
        Msg::Reject { reason, .. } => Err(Error::Rejected(reason)),
        m => Err(Error::Protocol(format!("{m:?}"))),
    }
}

/// Asks the primary at `addr` of `region` at `epoch` to stop serving it for a planned handoff;
/// returns the LSN every backup acknowledged once it stopped.
pub async fn handoff(addr: &str, region: u32, epoch: u64) -> Result<u64> {
    match request(addr, Msg::Handoff { epoch, region }).await? {
        Msg::HandedOff { last_lsn, .. } => Ok(last_lsn),
        Msg::Reject { reason, .. } => Err(Error::Rejected(reason)),
        m => Err(Error::Protocol(format!("{m:?}"))),
    }
}

/// Asks the primary at `addr` to fence `region` at `epoch` and split it at `at` into `child`;
/// returns the region's last LSN, which every backup holds.
pub async fn split(addr: &str, region: u32, epoch: u64, at: Vec<u8>, child: u32) -> Result<u64> {
    match request(addr, Msg::Split { epoch, region, at, child }).await? {
        Msg::HandedOff { last_lsn, .. } => Ok(last_lsn),
        Msg::Reject { reason, .. } => Err(Error::Rejected(reason)),
        m => Err(Error::Protocol(format!("{m:?}"))),
    }
}

/// Asks the primary at `addr` of `region` (at `epoch`) and `right` (at `right_epoch`) to fence
/// both and merge `right` into `region`, which leads again at `merged_epoch` once a map names
/// it so; returns the merged region's last LSN.
pub async fn merge(
    addr: &str,
    (region, epoch): (u32, u64),
    (right, right_epoch): (u32, u64),
    merged_epoch: u64,
) -> Result<u64> {
    match request(addr, Msg::Merge { epoch, region, right_epoch, right, merged_epoch }).await? {
        Msg::HandedOff { last_lsn, .. } => Ok(last_lsn),
        Msg::Reject { reason, .. } => Err(Error::Rejected(reason)),
        m => Err(Error::Protocol(format!("{m:?}"))),
    }
}

fn done(m: Msg) -> Result<()> {
    match m {
        Msg::Done { .. } => Ok(()),
        Msg::Reject { reason, .. } => Err(Error::Rejected(reason)),
        m => Err(Error::Protocol(format!("{m:?}"))),
    }
}

/// Asks the node at `addr` to become a backup of `region` (keys `start..end`) at `epoch`.
pub async fn host(addr: &str, region: u32, epoch: u64, start: Vec<u8>, end: Option<Vec<u8>>) -> Result<()> {
    done(request(addr, Msg::Host { epoch, region, start, end }).await?)
}

/// Asks the primary at `addr` to ship `region` to `node` too; answered once the new backup
/// has been sent its full copy.
pub async fn add_backup(
    addr: &str,
    region: u32,
    epoch: u64,
    node: &str,
    native: &str,
    replication: &str,
) -> Result<()> {
    let m = Msg::AddBackup {
        epoch,
        region,
        node: node.to_string(),
        native: native.to_string(),
        replication: replication.to_string(),
    };
    done(request(addr, m).await?)
}

/// All of a region's pairs, with their versions, on the node at `addr`, whatever its role there.
pub async fn dump(addr: &str, region: u32) -> Result<Vec<DumpPair>> {
    let mut out = Vec::new();
    let mut after = None;
    loop {
        match request(addr, Msg::Dump { region, after: after.clone(), limit: 5000 }).await? {
            Msg::DumpPage { pairs, more, .. } => {
                after = pairs.last().map(|p| p.0.clone());
                out.extend(pairs);
                if !more || after.is_none() {
                    return Ok(out);
                }
            }
            Msg::Reject { reason, .. } => return Err(Error::Rejected(reason)),
            m => return Err(Error::Protocol(format!("{m:?}"))),
        }
    }
}
