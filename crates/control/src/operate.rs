//! What an operator asks of a running cluster, through etcd: hand a region's primary role to a
//! backup (`halyard admin transfer`), move a copy (`halyard admin move`), drain a node, undo a
//! drain, remove a node for good. Each puts a request or a mark the master acts on
//! (`schedule.rs`) and, for the first three, waits until the map shows it done; `on` is called
//! with every view read meanwhile (progress bars).

use crate::etcd::{Client, Compare, CompareOp, Txn, TxnOp};
use crate::layout::{Layout, RegionRecord, Request};
use crate::view::View;
use crate::{Error, Result};
use std::time::{Duration, Instant};

/// How often the waits below read the cluster.
const POLL: Duration = Duration::from_millis(20);

fn region(v: &View, id: u32) -> Result<&RegionRecord> {
    v.regions.get(&id).map(|(r, _)| r).ok_or_else(|| Error::Invalid(format!("the cluster has no region {id}")))
}

/// Waits until `done` holds for a view (calling `on` with each), giving up after `wait` or
/// once the master dropped the request about `region` without it holding (no request and no
/// change of the region in its log).
async fn wait_for(
    client: &mut Client,
    layout: &Layout,
    region: Option<u32>,
    wait: Duration,
    mut on: impl FnMut(&View),
    done: impl Fn(&View) -> bool,
) -> Result<View> {
    let t0 = Instant::now();
    loop {
        tokio::time::sleep(POLL).await;
        let v = View::load(client, layout).await?;
        on(&v);
        if done(&v) {
            return Ok(v);
        }
        if let Some(id) = region {
            let asked = v.requests.iter().any(|(_, q)| q.region() == id);
            let busy = v.intents.iter().any(|(_, i)| i.region() == id);
            if !asked && !busy {
                // Read again: the map may have changed in the same transaction.
                let v = View::load(client, layout).await?;
                if done(&v) {
                    return Ok(v);
                }
                return Err(Error::Invalid(
                    "the master dropped the request without carrying it out (see its log: the target is no longer live, or the group changed)".into(),
                ));
            }
        }
        if t0.elapsed() > wait {
            return Err(Error::Invalid(format!("not done within {wait:?}; the master goes on with it")));
        }
    }
}

/// Asks the master to hand region `id`'s primary role to its backup `to` (a planned handoff)
/// and waits until the map names `to`; returns the region's new epoch.
pub async fn transfer(client: &mut Client, layout: &Layout, id: u32, to: &str, wait: Duration) -> Result<u64> {
    let v = View::load(client, layout).await?;
    let r = region(&v, id)?;
    if r.spec.primary == to {
        return Ok(r.spec.epoch);
    }
    if !r.spec.backups.iter().any(|b| b == to) || !v.holds(r, to) {
        return Err(Error::Invalid(format!(
            "{to} is not a live backup of region {id} (primary {}, backups {:?}): a handoff goes to a backup that holds the region",
            r.spec.primary, r.spec.backups
        )));
    }
    let q = Request::Transfer { region: id, to: to.to_string() };
    client.put(layout.request(id), serde_json::to_vec(&q).unwrap_or_default(), None).await?;
    let led = |v: &View| v.regions.get(&id).is_some_and(|(r, _)| r.spec.primary == to);
    let v = wait_for(client, layout, Some(id), wait, |_| {}, led).await?;
    Ok(region(&v, id)?.spec.epoch)
}

/// Asks the master to split region `id` at key `at` (as region keys are written: UTF-8 or
/// `hex:`) and waits until the map holds a region starting there; returns its id.
pub async fn split(client: &mut Client, layout: &Layout, id: u32, at: &str, wait: Duration) -> Result<u32> {
    let v = View::load(client, layout).await?;
    let r = region(&v, id)?;
    if !crate::schedule::split_applies(r, at) {
        return Err(Error::Invalid(format!(
            "{at:?} is not a key inside region {id} past its first ({:?}..{:?}): a split key lies strictly inside the region",
            r.spec.start, r.spec.end
        )));
    }
    let q = Request::Split { region: id, at: at.to_string() };
    client.put(layout.request(id), serde_json::to_vec(&q).unwrap_or_default(), None).await?;
    let child = |v: &View| v.regions.values().find(|(r, _)| r.spec.start == at).map(|(r, _)| r.spec.id);
    let v = wait_for(client, layout, Some(id), wait, |_| {}, |v| child(v).is_some()).await?;
    child(&v).ok_or_else(|| Error::Invalid("the split region vanished from the map".into()))
}

/// Asks the master to merge the region after `id` into `id` and waits until the map no longer
/// holds that region; returns its id. Both must have the same primary and backups (move their
/// copies first: `halyard admin transfer`, `halyard admin move`).
pub async fn merge(client: &mut Client, layout: &Layout, id: u32, wait: Duration) -> Result<u32> {
    let t0 = std::time::Instant::now();
    let gone = loop {
        let v = View::load(client, layout).await?;
        let r = region(&v, id)?;
        let Some(right) = crate::schedule::right_of(&v, r) else {
            return Err(Error::Invalid(format!(
                "region {id} reaches the end of the key space: nothing follows it to merge"
            )));
        };
        match crate::schedule::merge_blocker(&v, r, right) {
            None => break right.spec.id,
            Some(Err(why)) => return Err(Error::Invalid(why)),
            // Passes by itself (a split or copy just ended): asked again in a moment.
            Some(Ok(why)) if t0.elapsed() > wait => return Err(Error::Invalid(format!("cannot merge yet: {why}"))),
            Some(Ok(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    let q = Request::Merge { region: id };
    client.put(layout.request(id), serde_json::to_vec(&q).unwrap_or_default(), None).await?;
    wait_for(client, layout, Some(id), wait, |_| {}, |v| !v.regions.contains_key(&gone)).await?;
    Ok(gone)
}

/// Asks the master to move region `id`'s copy from `from` to `to` and waits until `to` holds
/// it and `from` left the group.
pub async fn move_region(
    client: &mut Client,
    layout: &Layout,
    id: u32,
    from: &str,
    to: &str,
    wait: Duration,
    on: impl FnMut(&View),
) -> Result<()> {
    let v = View::load(client, layout).await?;
    let r = region(&v, id)?;
    if !r.spec.has_member(from) {
        return Err(Error::Invalid(format!(
            "{from} holds no copy of region {id} (primary {}, backups {:?})",
            r.spec.primary, r.spec.backups
        )));
    }
    if r.spec.has_member(to) {
        return Err(Error::Invalid(format!("{to} already holds a copy of region {id}")));
    }
    if !crate::schedule::eligible(&v, to) {
        return Err(Error::Invalid(format!("{to} cannot take copies: it is not up (see `halyard cluster status`)")));
    }
    let q = Request::Move { region: id, from: from.to_string(), to: to.to_string() };
    client.put(layout.request(id), serde_json::to_vec(&q).unwrap_or_default(), None).await?;
    let moved = |v: &View| {
        v.regions.get(&id).is_some_and(|(r, _)| {
            !r.spec.has_member(from) && (r.spec.primary == to || r.spec.backups.iter().any(|b| b == to))
        })
    };
    wait_for(client, layout, Some(id), wait, on, moved).await.map(drop)
}

/// Nodes that could hold copies if `node` left: live and not leaving, drained or removed.
fn others(v: &View, node: &str) -> usize {
    v.live.keys().filter(|n| *n != node && crate::schedule::eligible(v, n)).count()
}

/// Copies (primary, backup or learner) `node` holds.
pub fn copies_on(v: &View, node: &str) -> usize {
    v.regions.values().filter(|(r, _)| r.spec.has_member(node)).count()
}

/// Marks `node` to be drained (or, with `remove`, removed: a tombstone under which it may not
/// register again) and waits until no group holds a copy on it. Refused when fewer than the
/// cluster's `replicas` nodes would remain to hold the copies.
pub async fn drain(
    client: &mut Client,
    layout: &Layout,
    node: &str,
    remove: bool,
    wait: Duration,
    on: impl FnMut(&View),
) -> Result<()> {
    let v = View::load(client, layout).await?;
    if !v.members.contains_key(node) {
        return Err(Error::Invalid(format!("no node {node} ever joined the cluster")));
    }
    let replicas = v.config.as_ref().map_or(1, |c| c.replicas);
    if others(&v, node) < replicas && copies_on(&v, node) > 0 {
        return Err(Error::Invalid(format!(
            "{node} holds copies and only {} other nodes could take them, fewer than the {replicas} copies a region keeps: add a node first",
            others(&v, node)
        )));
    }
    let key = if remove { layout.removed(node) } else { layout.drain(node) };
    client.put(key, Vec::new(), None).await?;
    wait_for(client, layout, None, wait, on, |v| copies_on(v, node) == 0).await.map(drop)
}

/// Ends a drain: `node` may take copies again (the balancer gives it some).
pub async fn undrain(client: &mut Client, layout: &Layout, node: &str) -> Result<()> {
    client.delete(layout.drain(node), None).await?;
    Ok(())
}

/// Turns the master's balancer and merges of small idle regions on or off (`None`: as they
/// are); returns the settings now in force.
pub async fn configure(
    client: &mut Client,
    layout: &Layout,
    balance: Option<bool>,
    merge: Option<bool>,
) -> Result<crate::layout::ClusterConfig> {
    let v = View::load(client, layout).await?;
    let mut config = v.config.ok_or_else(|| {
        Error::Invalid(format!("no cluster under {}: create it with `halyard cluster init`", layout.root()))
    })?;
    config.balance = balance.unwrap_or(config.balance);
    config.merge = merge.unwrap_or(config.merge);
    client.put(layout.config(), serde_json::to_vec(&config).unwrap_or_default(), None).await?;
    Ok(config)
}

/// Whether `node` was removed from the cluster (a tombstone): it may not register.
pub async fn is_removed(client: &mut Client, layout: &Layout, node: &str) -> Result<bool> {
    let txn = Txn::new()
        .when([Compare::create_revision(layout.removed(node), CompareOp::Greater, 0)])
        .and_then([TxnOp::get(layout.removed(node), None)]);
    Ok(client.txn(txn).await?.succeeded())
}
